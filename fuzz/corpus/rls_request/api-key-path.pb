

edge_proxy#

api_keyalice

path/export

api_keypremium-bob
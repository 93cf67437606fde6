

edge_proxy


user_agentcurl$

api_keyinternal-monitoring

remote_address::1 


edge_proxy*

remote_address	192.0.2.9ÿÿÿÿÿÿÿÿÿÿÿÿÿ
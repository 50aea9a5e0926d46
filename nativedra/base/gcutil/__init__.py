"""Keeping the cyclic garbage collector off a process's long-lived objects: the extender's listed
cluster and plans, the plugin's published devices."""

"""ZooKeeper for the pipeline: a server launcher, the znode layout, and a connected kazoo client."""

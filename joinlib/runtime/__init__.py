"""The message-driven node runtime: the same code runs on the simulator and on Kafka."""

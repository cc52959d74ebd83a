"""RocketMQ's remoting protocol (the 4.x clients' and tools' TCP protocol) on its own port."""

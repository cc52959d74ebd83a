"""Authentication (RocketMQ's MQv2-HMAC-SHA1 request signature) and ACL 2.0 authorization."""

"""The gRPC front: apache.rocketmq.v2.MessagingService and skiff.admin.v1.AdminService."""

// The RocketMQ 5.x remoting client (rocketmq-client 5.x) popping messages: its own
// MQClientAPIImpl.popMessageAsync, (batch)AckMessageAsync and changeInvisibleTimeAsync, the
// calls its pop-mode push consumer makes, unchanged.
//
// Sends --count messages with a DefaultMQProducer through the broker's remoting port
// (namesrvAddr), pops them as --group, puts the first one back at once
// (changeInvisibleTime 0), pops it again, and acks every message with the receipt
// (POP_CK) the client built: the first pop's in one batchAckMessageAsync, the one popped
// again with ackMessageAsync. Prints one JSON object:
//   {"sent": n, "popped": [unique ids], "again": id, "againReconsumeTimes": k,
//    "acked": n, "errors": [text]}
//
// Usage: RemotingPopClient calls --namesrv HOST:PORT --topic T --group G --count N
//
// Mode "push" instead runs a DefaultMQPushConsumer with setClientRebalance(false): the
// broker assigns its queues (QUERY_ASSIGNMENT) and, with the group's mode set to POP,
// the consumer pops and acks them itself. Prints
//   {"sent": n, "received": [unique ids], "withReceipt": n, "errors": [text]}

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;

public class RemotingPopClient {
    static final long TIMEOUT_MS = 10_000;

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("push")) {
            push(args);
            return;
        }
        String namesrv = arg(args, "--namesrv"), topic = arg(args, "--topic");
        String group = arg(args, "--group");
        int count = Integer.parseInt(arg(args, "--count"));
        List<String> errors = new ArrayList<>();
        List<String> popped = new ArrayList<>();
        String again = "";
        int againTimes = -1, acked = 0, sent = 0;
        DefaultMQProducer producer = new DefaultMQProducer("pop-senders");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message message = new Message(topic, "T", ("pop-" + i).getBytes(StandardCharsets.UTF_8));
                producer.send(message);
                sent++;
            }
            String broker = producer.getDefaultMQProducerImpl().getTopicPublishInfoTable()
                .get(topic).getMessageQueueList().get(0).getBrokerName();
            String addr = producer.getDefaultMQProducerImpl().getMqClientFactory()
                .findBrokerAddressInPublish(broker);
            MQClientAPIImpl api = producer.getDefaultMQProducerImpl().getMqClientFactory()
                .getMQClientAPIImpl();
            List<MessageExt> held = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (held.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : pop(api, broker, addr, topic, group)) {
                    held.add(m);
                    popped.add(m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                }
            }
            if (!held.isEmpty()) {
                MessageExt first = held.get(0);
                String receipt = first.getProperty(MessageConst.PROPERTY_POP_CK);
                ChangeInvisibleTimeRequestHeader change = new ChangeInvisibleTimeRequestHeader();
                change.setConsumerGroup(group);
                change.setTopic(topic);
                change.setQueueId(first.getQueueId());
                change.setExtraInfo(receipt);
                change.setOffset(first.getQueueOffset());
                change.setInvisibleTime(0L);
                AckResult changed = settle(callback -> api.changeInvisibleTimeAsync(
                    broker, addr, change, TIMEOUT_MS, callback));
                if (changed.getStatus() != AckStatus.OK) {
                    errors.add("changeInvisibleTime: " + changed.getStatus());
                }
                held.remove(0);
                while (again.isEmpty() && System.currentTimeMillis() < deadline) {
                    for (MessageExt m : pop(api, broker, addr, topic, group)) {
                        again = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
                        againTimes = m.getReconsumeTimes();
                        held.add(m);
                    }
                }
            }
            // The first pop's others in one batch ack, the one popped again on its own.
            List<String> receipts = new ArrayList<>();
            for (MessageExt m : held.subList(0, Math.max(0, held.size() - 1))) {
                receipts.add(m.getProperty(MessageConst.PROPERTY_POP_CK));
            }
            if (!receipts.isEmpty()) {
                AckResult batch = settle(callback -> api.batchAckMessageAsync(
                    addr, TIMEOUT_MS, callback, topic, group, receipts));
                if (batch.getStatus() == AckStatus.OK) {
                    acked += receipts.size();
                } else {
                    errors.add("batchAck: " + batch.getStatus());
                }
            }
            for (MessageExt m : held.subList(Math.max(0, held.size() - 1), held.size())) {
                AckMessageRequestHeader ack = new AckMessageRequestHeader();
                ack.setConsumerGroup(group);
                ack.setTopic(topic);
                ack.setQueueId(m.getQueueId());
                ack.setExtraInfo(m.getProperty(MessageConst.PROPERTY_POP_CK));
                ack.setOffset(m.getQueueOffset());
                AckResult result = settle(callback -> api.ackMessageAsync(addr, TIMEOUT_MS, callback, ack));
                if (result.getStatus() == AckStatus.OK) {
                    acked++;
                } else {
                    errors.add("ack: " + result.getStatus());
                }
            }
        } catch (Exception e) {
            errors.add(e.toString());
        } finally {
            producer.shutdown();
        }
        StringBuilder out = new StringBuilder("{\"sent\": " + sent + ", \"popped\": [");
        for (int i = 0; i < popped.size(); i++) {
            out.append(i > 0 ? ", " : "").append(quote(popped.get(i)));
        }
        out.append("], \"again\": ").append(quote(again))
            .append(", \"againReconsumeTimes\": ").append(againTimes)
            .append(", \"acked\": ").append(acked).append(", \"errors\": [");
        for (int i = 0; i < errors.size(); i++) {
            out.append(i > 0 ? ", " : "").append(quote(errors.get(i)));
        }
        System.out.println(out.append("]}"));
        System.exit(0);
    }

    static void push(String[] args) throws Exception {
        String namesrv = arg(args, "--namesrv"), topic = arg(args, "--topic");
        String group = arg(args, "--group");
        int count = Integer.parseInt(arg(args, "--count"));
        List<String> errors = new ArrayList<>();
        java.util.Set<String> received = java.util.concurrent.ConcurrentHashMap.newKeySet();
        java.util.concurrent.atomic.AtomicInteger withReceipt = new java.util.concurrent.atomic.AtomicInteger();
        int sent = 0;
        DefaultMQProducer producer = new DefaultMQProducer("pop-push-senders");
        producer.setNamesrvAddr(namesrv);
        org.apache.rocketmq.client.consumer.DefaultMQPushConsumer consumer =
            new org.apache.rocketmq.client.consumer.DefaultMQPushConsumer(group);
        try {
            producer.start();
            for (int i = 0; i < count; i++) {
                producer.send(new Message(topic, "T", ("push-" + i).getBytes(StandardCharsets.UTF_8)));
                sent++;
            }
            consumer.setNamesrvAddr(namesrv);
            consumer.setClientRebalance(false);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener(
                (org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently) (msgs, context) -> {
                    for (MessageExt m : msgs) {
                        if (m.getProperty(MessageConst.PROPERTY_POP_CK) != null) {
                            withReceipt.incrementAndGet();
                        }
                        received.add(m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                    }
                    return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            consumer.start();
            long deadline = System.currentTimeMillis() + 90_000;
            while (received.size() < count && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
            }
            // Its acks are sent after the listener returns: give the last ones a moment.
            Thread.sleep(3_000);
        } catch (Exception e) {
            errors.add(e.toString());
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
        StringBuilder out = new StringBuilder("{\"sent\": " + sent + ", \"received\": [");
        int i = 0;
        for (String id : received) {
            out.append(i++ > 0 ? ", " : "").append(quote(id));
        }
        out.append("], \"withReceipt\": ").append(withReceipt.get()).append(", \"errors\": [");
        for (int j = 0; j < errors.size(); j++) {
            out.append(j > 0 ? ", " : "").append(quote(errors.get(j)));
        }
        System.out.println(out.append("]}"));
        System.exit(0);
    }

    static List<MessageExt> pop(MQClientAPIImpl api, String broker, String addr, String topic,
        String group) throws Exception {
        PopMessageRequestHeader header = new PopMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(topic);
        header.setQueueId(-1);
        header.setMaxMsgNums(32);
        header.setInvisibleTime(30_000L);
        header.setPollTime(2_000L);
        header.setBornTime(System.currentTimeMillis());
        header.setInitMode(0);
        header.setExpType("TAG");
        header.setExp("*");
        CompletableFuture<PopResult> done = new CompletableFuture<>();
        api.popMessageAsync(broker, addr, header, TIMEOUT_MS, new PopCallback() {
            public void onSuccess(PopResult result) {
                done.complete(result);
            }

            public void onException(Throwable e) {
                done.completeExceptionally(e);
            }
        });
        PopResult result = done.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        List<MessageExt> found = result.getMsgFoundList();
        if (found == null) {
            return new ArrayList<>();
        }
        for (MessageExt m : found) {
            // The receipt must be the client's own, in RocketMQ's form.
            ExtraInfoUtil.getQueueOffset(ExtraInfoUtil.split(m.getProperty(MessageConst.PROPERTY_POP_CK)));
        }
        return found;
    }

    interface Settling {
        void start(AckCallback callback) throws Exception;
    }

    static AckResult settle(Settling settling) throws Exception {
        CompletableFuture<AckResult> done = new CompletableFuture<>();
        settling.start(new AckCallback() {
            public void onSuccess(AckResult result) {
                done.complete(result);
            }

            public void onException(Throwable e) {
                done.completeExceptionally(e);
            }
        });
        return done.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    static String arg(String[] args, String name) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        throw new IllegalArgumentException("missing " + name);
    }

    static String quote(String text) {
        return "\"" + (text == null ? "" : text.replace("\\", "\\\\").replace("\"", "\\\"")) + "\"";
    }
}

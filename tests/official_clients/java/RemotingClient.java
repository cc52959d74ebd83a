// The classic RocketMQ client (rocketmq-client 4.x, remoting protocol) against a name-server
// address, printing a JSON summary on stdout. Unmodified client, default settings.
//
// java RemotingClient MODE --namesrv HOST:PORT --topic T [--group G] [--count N]
//     [--deadline-s S]
//
// Modes:
//   produce-consume  a DefaultMQProducer sends COUNT messages each way: sync (tags
//                    alternating TagA and TagB), async, oneway and one batch (TagA), then a
//                    DefaultMQPushConsumer (clustering, from the first offset) subscribed
//                    to TagA receives until every TagA message came or the deadline passed:
//                    {"sent": [{"kind", "msgId", "offsetMsgId", "brokerName", "queueId",
//                    "queueOffset", "tag"}], "received": [{"msgId", "tag", "queueId", "queueOffset",
//                    "body", "properties"}], "errors": [text]}; then a second push
//                    consumer (GROUP-sql) selects "origin = 'remoting' AND idx >= 1" by
//                    SQL92 into "selected"
//   send             a DefaultMQProducer sends COUNT messages (tag TagA, key k<i>, user
//                    property origin=remoting) synchronously: {"sent": [...]}
//   rebalance        push consumers a and b of GROUP (clustering) share TOPIC's queues: a
//                    alone holds them all; once b joins each holds half, and COUNT sync
//                    sends are consumed between them; once b leaves a holds them all
//                    again and consumes COUNT more: "received" entries are
//                    {"consumer", "phase", "message"}
//   lite-pull        a DefaultLitePullConsumer of GROUP receives COUNT messages, commits
//                    them (commitSync) and stops: {"received": [...]}
//   retry            COUNT sync sends (in "sent"), then a push consumer of GROUP with
//                    maxReconsumeTimes 2 answers RECONSUME_LATER (next delay level 1) to every
//                    delivery until each message came 3 times, waits 2 s more for any
//                    further one: "received" entries are {"reconsumeTimes", "message"}
//   orderly          orderly push consumers a, then b, of GROUP (MessageListenerOrderly):
//                    once they share TOPIC's queues (each holding the broker's lock of its
//                    own), COUNT sync sends into each queue in turn; a watcher records an
//                    error whenever both hold one queue's lock: "received" entries are
//                    {"consumer", "message"}
//   transaction      a TransactionMQProducer (group GROUP-tx) sends COUNT half messages
//                    whose local transactions answer COMMIT_MESSAGE (idx 0), ROLLBACK_MESSAGE
//                    (idx 1) and UNKNOW (the rest; its check answers COMMIT_MESSAGE but
//                    ROLLBACK_MESSAGE for idx 1); a push consumer of GROUP receives until
//                    every committed one came, then 2 s more: "sent" entries carry
//                    "localState"; "received" entries are {"kind": "check", "msgId" (its
//                    UNIQ_KEY), "topic", "body"} or {"kind": "delivery", "message"}
// Exit status 0 when no error occurred.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

public class RemotingClient {
    static final List<String> errors = Collections.synchronizedList(new ArrayList<>());
    static final List<String> sent = Collections.synchronizedList(new ArrayList<>());
    static final ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
    static final ConcurrentLinkedQueue<String> selected = new ConcurrentLinkedQueue<>();

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        Map<String, String> options = new TreeMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            options.put(args[i].substring(2), args[i + 1]);
        }
        String namesrv = options.get("namesrv");
        String topic = options.get("topic");
        String group = options.getOrDefault("group", "remoting-group");
        int count = Integer.parseInt(options.getOrDefault("count", "4"));
        long deadlineMs = (long) (Double.parseDouble(options.getOrDefault("deadline-s", "60")) * 1000);
        try {
            switch (mode) {
                case "produce-consume":
                    produceConsume(namesrv, topic, group, count, deadlineMs);
                    break;
                case "send":
                    send(namesrv, topic, group, count);
                    break;
                case "rebalance":
                    rebalance(namesrv, topic, group, count, deadlineMs);
                    break;
                case "lite-pull":
                    litePull(namesrv, topic, group, count, deadlineMs);
                    break;
                case "orderly":
                    orderly(namesrv, topic, group, count, deadlineMs);
                    break;
                case "transaction":
                    transaction(namesrv, topic, group, count, deadlineMs);
                    break;
                case "retry":
                    retry(namesrv, topic, group, count, deadlineMs);
                    break;
                default:
                    errors.add("unknown mode " + mode);
            }
        } catch (Throwable t) {
            errors.add(t.toString());
        }
        StringBuilder out = new StringBuilder("{\"sent\": [");
        out.append(String.join(", ", sent)).append("], \"received\": [");
        out.append(String.join(", ", received)).append("], \"selected\": [");
        out.append(String.join(", ", selected)).append("], \"errors\": [");
        List<String> quoted = new ArrayList<>();
        for (String e : errors) {
            quoted.add(quote(e));
        }
        out.append(String.join(", ", quoted)).append("]}");
        System.out.println(out);
        System.out.flush();
        System.exit(errors.isEmpty() ? 0 : 1);
    }

    static DefaultMQProducer producer(String namesrv, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        return producer;
    }

    static Message message(String topic, String tag, String body, int i) {
        Message message = new Message(topic, tag, "k" + i, body.getBytes(StandardCharsets.UTF_8));
        message.putUserProperty("origin", "remoting");
        message.putUserProperty("idx", String.valueOf(i));
        return message;
    }

    static void record(String kind, SendResult result, String tag, int i) {
        sent.add("{\"kind\": " + quote(kind) + ", \"idx\": " + i + ", \"msgId\": " + quote(result.getMsgId())
            + ", \"offsetMsgId\": " + quote(result.getOffsetMsgId())
            + ", \"status\": " + quote(String.valueOf(result.getSendStatus()))
            + ", \"brokerName\": " + quote(result.getMessageQueue().getBrokerName())
            + ", \"queueId\": " + result.getMessageQueue().getQueueId()
            + ", \"queueOffset\": " + result.getQueueOffset() + ", \"tag\": " + quote(tag) + "}");
    }

    static void send(String namesrv, String topic, String group, int count) throws Exception {
        DefaultMQProducer producer = producer(namesrv, group);
        try {
            for (int i = 0; i < count; i++) {
                record("sync", producer.send(message(topic, "TagA", "remoting-" + i, i)), "TagA", i);
            }
        } finally {
            producer.shutdown();
        }
    }

    static void produceConsume(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        DefaultMQProducer producer = producer(namesrv, group);
        int expected = 0;
        try {
            for (int i = 0; i < count; i++) {
                String tag = i % 2 == 0 ? "TagA" : "TagB";
                record("sync", producer.send(message(topic, tag, "sync-" + i, i)), tag, i);
                if (tag.equals("TagA")) {
                    expected++;
                }
            }
            CountDownLatch callbacks = new CountDownLatch(count);
            for (int i = 0; i < count; i++) {
                final int index = i;
                producer.send(message(topic, "TagA", "async-" + i, i), new SendCallback() {
                    public void onSuccess(SendResult result) {
                        record("async", result, "TagA", index);
                        callbacks.countDown();
                    }

                    public void onException(Throwable e) {
                        errors.add("async send: " + e);
                        callbacks.countDown();
                    }
                });
            }
            if (!callbacks.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                errors.add("async sends were not all answered");
            }
            expected += count;
            for (int i = 0; i < count; i++) {
                Message message = message(topic, "TagA", "oneway-" + i, i);
                producer.sendOneway(message);
                sent.add("{\"kind\": \"oneway\", \"idx\": " + i + ", \"msgId\": "
                    + quote(MessageClientIDSetter.getUniqID(message)) + ", \"tag\": \"TagA\"}");
            }
            expected += count;
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                batch.add(message(topic, "TagA", "batch-" + i, i));
            }
            SendResult result = producer.send(batch);
            String[] ids = result.getMsgId().split(",");
            for (int i = 0; i < ids.length; i++) {
                String id = ids[i];
                sent.add("{\"kind\": \"batch\", \"idx\": " + i + ", \"msgId\": " + quote(id) + ", \"offsetMsgId\": "
                    + quote(result.getOffsetMsgId()) + ", \"tag\": \"TagA\"}");
            }
            expected += count;
        } finally {
            producer.shutdown();
        }
        CountDownLatch all = new CountDownLatch(expected);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "TagA");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                received.add(view(message));
                all.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            if (!all.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                errors.add("received " + received.size() + " of " + expected + " TagA messages");
            }
            // Whatever else would come (a TagB message the filter let through) comes now.
            Thread.sleep(1000);
        } finally {
            consumer.shutdown();
        }
        // A second group selects by SQL92 over the user properties: the broker filters.
        int wanted = 4 * (count - 1);
        CountDownLatch some = new CountDownLatch(wanted);
        DefaultMQPushConsumer sql = new DefaultMQPushConsumer(group + "-sql");
        sql.setNamesrvAddr(namesrv);
        sql.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        sql.subscribe(topic, MessageSelector.bySql("origin = 'remoting' AND idx >= 1"));
        sql.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                selected.add(view(message));
                some.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        sql.start();
        try {
            if (!some.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                errors.add("selected " + selected.size() + " of " + wanted + " messages by SQL92");
            }
            Thread.sleep(1000);
        } finally {
            sql.shutdown();
        }
    }

    static volatile int phase = 1;

    static DefaultMQPushConsumer member(String namesrv, String topic, String group, String name,
        CountDownLatch[] latches) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(name);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                received.add("{\"consumer\": " + quote(name) + ", \"phase\": " + phase
                    + ", \"message\": " + view(message) + "}");
                latches[0].countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        return consumer;
    }

    static int held(DefaultMQPushConsumer consumer, String topic) {
        int queues = 0;
        for (MessageQueue queue
            : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (queue.getTopic().equals(topic)) {
                queues++;
            }
        }
        return queues;
    }

    static boolean until(java.util.function.BooleanSupplier condition, long deadlineMs, String what)
        throws InterruptedException {
        long end = System.currentTimeMillis() + deadlineMs;
        while (!condition.getAsBoolean()) {
            if (System.currentTimeMillis() > end) {
                errors.add("timed out waiting until " + what);
                return false;
            }
            Thread.sleep(50);
        }
        return true;
    }

    static void rebalance(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        CountDownLatch[] latches = {new CountDownLatch(count)};
        DefaultMQProducer producer = producer(namesrv, group);
        DefaultMQPushConsumer a = member(namesrv, topic, group, "a", latches);
        DefaultMQPushConsumer b = null;
        try {
            int all = a.fetchSubscribeMessageQueues(topic).size();
            until(() -> held(a, topic) == all, deadlineMs, "a holds every queue");
            b = member(namesrv, topic, group, "b", latches);
            DefaultMQPushConsumer joined = b;
            if (until(() -> held(a, topic) + held(joined, topic) == all && held(joined, topic) > 0
                && held(a, topic) > 0, deadlineMs,
                "a and b share the queues (a holds " + held(a, topic) + ")")) {
                for (int i = 0; i < count; i++) {
                    record("sync", producer.send(message(topic, "TagA", "shared-" + i, i)), "TagA", i);
                }
                if (!latches[0].await(deadlineMs, TimeUnit.MILLISECONDS)) {
                    errors.add("the shared messages did not all arrive");
                }
            }
            b.shutdown();
            b = null;
            phase = 2;
            latches[0] = new CountDownLatch(count);
            if (until(() -> held(a, topic) == all, deadlineMs, "a holds every queue again")) {
                for (int i = 0; i < count; i++) {
                    record("sync", producer.send(message(topic, "TagA", "alone-" + i, i)), "TagA", i);
                }
                if (!latches[0].await(deadlineMs, TimeUnit.MILLISECONDS)) {
                    errors.add("the messages after b left did not all arrive");
                }
            }
            Thread.sleep(500);
        } finally {
            if (b != null) {
                b.shutdown();
            }
            a.shutdown();
            producer.shutdown();
        }
    }

    static void litePull(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(false);
        consumer.subscribe(topic, "*");
        consumer.start();
        try {
            long end = System.currentTimeMillis() + deadlineMs;
            while (received.size() < count && System.currentTimeMillis() < end) {
                for (MessageExt message : consumer.poll(1000)) {
                    received.add(view(message));
                }
            }
            consumer.commitSync();
            if (received.size() < count) {
                errors.add("received " + received.size() + " of " + count + " messages");
            }
        } finally {
            consumer.shutdown();
        }
    }

    static void retry(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        send(namesrv, topic, group, count);
        CountDownLatch deliveries = new CountDownLatch(3 * count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(2);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                received.add("{\"reconsumeTimes\": " + message.getReconsumeTimes()
                    + ", \"message\": " + view(message) + "}");
                deliveries.countDown();
            }
            context.setDelayLevelWhenNextConsume(1);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        consumer.start();
        try {
            if (!deliveries.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                errors.add("only " + received.size() + " of " + 3 * count + " deliveries came");
            }
            // A delivery past maxReconsumeTimes would come about a second later.
            Thread.sleep(2000);
        } finally {
            consumer.shutdown();
        }
    }

    static DefaultMQPushConsumer orderlyMember(String namesrv, String topic, String group, String name,
        CountDownLatch[] latches) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(name);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
            for (MessageExt message : messages) {
                received.add("{\"consumer\": " + quote(name) + ", \"message\": " + view(message) + "}");
                latches[0].countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        return consumer;
    }

    // The queues of TOPIC whose broker lock the consumer holds (and is still consuming).
    static List<Integer> locked(DefaultMQPushConsumer consumer, String topic) {
        List<Integer> queues = new ArrayList<>();
        if (consumer == null) {
            return queues;
        }
        for (Map.Entry<MessageQueue, ProcessQueue> entry
            : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
            ProcessQueue queue = entry.getValue();
            if (entry.getKey().getTopic().equals(topic) && queue.isLocked() && !queue.isDropped()) {
                queues.add(entry.getKey().getQueueId());
            }
        }
        return queues;
    }

    static void orderly(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        CountDownLatch[] latches = {new CountDownLatch(1)};
        DefaultMQProducer producer = producer(namesrv, group);
        DefaultMQPushConsumer a = orderlyMember(namesrv, topic, group, "a", latches);
        DefaultMQPushConsumer[] b = {null};
        java.util.concurrent.atomic.AtomicBoolean watching = new java.util.concurrent.atomic.AtomicBoolean(true);
        Thread watcher = new Thread(() -> {
            while (watching.get()) {
                // Held by a before and after b's were read: a hand-over between the reads
                // is not an overlap.
                List<Integer> both = locked(a, topic);
                both.retainAll(locked(b[0], topic));
                both.retainAll(locked(a, topic));
                if (!both.isEmpty()) {
                    errors.add("a and b both hold the lock of queues " + both);
                    return;
                }
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        watcher.start();
        try {
            List<MessageQueue> queues = new ArrayList<>(a.fetchSubscribeMessageQueues(topic));
            queues.sort((x, y) -> Integer.compare(x.getQueueId(), y.getQueueId()));
            int all = queues.size();
            until(() -> locked(a, topic).size() == all, deadlineMs, "a holds every queue's lock");
            b[0] = orderlyMember(namesrv, topic, group, "b", latches);
            if (until(() -> locked(a, topic).size() + locked(b[0], topic).size() == all
                && !locked(a, topic).isEmpty() && !locked(b[0], topic).isEmpty(), deadlineMs,
                "a and b share the queue locks (a holds " + locked(a, topic) + ")")) {
                latches[0] = new CountDownLatch(count * all);
                for (MessageQueue queue : queues) {
                    for (int i = 0; i < count; i++) {
                        String body = "q" + queue.getQueueId() + "-" + i;
                        record("sync", producer.send(message(topic, "TagA", body, i), queue), "TagA", i);
                    }
                }
                if (!latches[0].await(deadlineMs, TimeUnit.MILLISECONDS)) {
                    errors.add("received " + received.size() + " of " + count * all + " ordered messages");
                }
            }
        } finally {
            watching.set(false);
            watcher.join();
            if (b[0] != null) {
                b[0].shutdown();
            }
            a.shutdown();
            producer.shutdown();
        }
    }

    static void transaction(String namesrv, String topic, String group, int count, long deadlineMs)
        throws Exception {
        int committed = count - 1;
        CountDownLatch delivered = new CountDownLatch(committed);
        TransactionMQProducer producer = new TransactionMQProducer(group + "-tx");
        producer.setNamesrvAddr(namesrv);
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                int idx = Integer.parseInt(message.getUserProperty("idx"));
                return idx == 0 ? LocalTransactionState.COMMIT_MESSAGE
                    : idx == 1 ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                received.add("{\"kind\": \"check\", \"msgId\": " + quote(MessageClientIDSetter.getUniqID(message))
                    + ", \"topic\": " + quote(message.getTopic())
                    + ", \"body\": " + quote(new String(message.getBody(), StandardCharsets.UTF_8)) + "}");
                return "1".equals(message.getUserProperty("idx"))
                    ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        try {
            for (int i = 0; i < count; i++) {
                TransactionSendResult result = producer.sendMessageInTransaction(
                    message(topic, "TagA", "tx-" + i, i), null);
                sent.add("{\"idx\": " + i + ", \"msgId\": " + quote(result.getMsgId())
                    + ", \"status\": " + quote(String.valueOf(result.getSendStatus()))
                    + ", \"transactionId\": " + quote(result.getTransactionId())
                    + ", \"localState\": " + quote(String.valueOf(result.getLocalTransactionState())) + "}");
            }
            consumer.setNamesrvAddr(namesrv);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                for (MessageExt message : messages) {
                    received.add("{\"kind\": \"delivery\", \"message\": " + view(message) + "}");
                    delivered.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            if (!delivered.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                errors.add("only " + (committed - delivered.getCount()) + " of " + committed
                    + " committed messages were delivered");
            }
            // A rolled-back message would come by now.
            Thread.sleep(2000);
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    static String view(MessageExt message) {
        StringBuilder properties = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, String> e : new TreeMap<>(message.getProperties()).entrySet()) {
            if (!first) {
                properties.append(", ");
            }
            first = false;
            properties.append(quote(e.getKey())).append(": ").append(quote(e.getValue()));
        }
        properties.append("}");
        return "{\"msgId\": " + quote(message.getMsgId()) + ", \"tag\": " + quote(message.getTags())
            + ", \"topic\": " + quote(message.getTopic())
            + ", \"queueId\": " + message.getQueueId() + ", \"queueOffset\": " + message.getQueueOffset()
            + ", \"body\": " + quote(new String(message.getBody(), StandardCharsets.UTF_8))
            + ", \"properties\": " + properties + "}";
    }

    static String quote(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}

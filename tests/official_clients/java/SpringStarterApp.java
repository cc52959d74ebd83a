// A Spring Boot application on rocketmq-spring-boot-starter (unmodified, from Maven Central)
// against a name-server address, printing a JSON summary on stdout. Only the application's
// properties name Skiff: rocketmq.name-server and rocketmq.producer.group, as any
// RocketMQ shop's application.properties would.
//
// java -cp ... skiff.spring.SpringStarterApp --rocketmq.name-server=HOST:PORT
//     --rocketmq.producer.group=G --skiff.topic=T --skiff.tx-topic=TX --skiff.group=G
//     --skiff.count=N [--skiff.deadline-s=S]
//
// Four @RocketMQMessageListener beans (clustering, from the first offset) start with the
// context: GROUP-all takes TOPIC "*", GROUP-tags takes tag TagA, GROUP-sql selects
// "origin = 'spring' AND idx >= 3" by SQL92 and GROUP-tx takes TX-TOPIC. Then the
// RocketMQTemplate sends COUNT messages with syncSend and COUNT with asyncSend (idx 0 ..
// 2*COUNT-1, tags alternating TagA and TagB, key k<idx>, header origin=spring) and three
// with sendMessageInTransaction into TX-TOPIC, whose local listener answers COMMIT (idx 0),
// ROLLBACK (idx 1) and UNKNOWN (idx 2: its check-back answers COMMIT). The program waits
// until every listener has what it should, or the deadline passed, then 2 s more for any
// duplicate or rolled-back delivery, and prints
//   {"sent": [{"kind", "idx", "tag", "msgId", "status", "localState"?}],
//    "received": [{"listener", "msgId", "idx", "tag", "topic", "body", "origin"}],
//    "checks": [{"msgId", "idx"}], "errors": [text]}
// Exit status 0 when no error occurred.
package skiff.spring;

import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.annotation.RocketMQTransactionListener;
import org.apache.rocketmq.spring.annotation.SelectorType;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQLocalTransactionListener;
import org.apache.rocketmq.spring.core.RocketMQLocalTransactionState;
import org.apache.rocketmq.spring.core.RocketMQPushConsumerLifecycleListener;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.stereotype.Component;

@SpringBootApplication
public class SpringStarterApp implements CommandLineRunner {
    static final ConcurrentLinkedQueue<Map<String, Object>> RECEIVED = new ConcurrentLinkedQueue<>();
    static final ConcurrentLinkedQueue<Map<String, Object>> CHECKS = new ConcurrentLinkedQueue<>();
    static final ConcurrentLinkedQueue<String> ERRORS = new ConcurrentLinkedQueue<>();

    private final RocketMQTemplate template;

    @Value("${skiff.topic}")
    String topic;

    @Value("${skiff.tx-topic}")
    String txTopic;

    @Value("${skiff.count}")
    int count;

    @Value("${skiff.deadline-s:90}")
    int deadlineS;

    public SpringStarterApp(RocketMQTemplate template) {
        this.template = template;
    }

    public static void main(String[] args) {
        int status = 1;
        try {
            status = SpringApplication.exit(SpringApplication.run(SpringStarterApp.class, args));
        } catch (Throwable e) {
            ERRORS.add("the application failed: " + e);
            printSummary(new ArrayList<>());
        }
        System.exit(ERRORS.isEmpty() ? status : 1);
    }

    static final List<Map<String, Object>> SENT = new ArrayList<>();

    @Override
    public void run(String... args) throws Exception {
        List<Map<String, Object>> sent = SENT;
        CountDownLatch asyncDone = new CountDownLatch(count);
        for (int idx = 0; idx < 2 * count; idx++) {
            String tag = idx % 2 == 0 ? "TagA" : "TagB";
            Message<String> message = MessageBuilder.withPayload("spring-" + idx)
                .setHeader(RocketMQHeaders.KEYS, "k" + idx)
                .setHeader("origin", "spring")
                .setHeader("idx", String.valueOf(idx))
                .build();
            String destination = topic + ":" + tag;
            if (idx < count) {
                SendResult result = template.syncSend(destination, message);
                sent.add(sentEntry("sync", idx, tag, result));
            } else {
                final int i = idx;
                template.asyncSend(destination, message, new SendCallback() {
                    public void onSuccess(SendResult result) {
                        synchronized (sent) {
                            sent.add(sentEntry("async", i, tag, result));
                        }
                        asyncDone.countDown();
                    }

                    public void onException(Throwable e) {
                        ERRORS.add("asyncSend of idx " + i + " failed: " + e);
                        asyncDone.countDown();
                    }
                });
            }
        }
        if (!asyncDone.await(deadlineS, TimeUnit.SECONDS)) {
            ERRORS.add("asyncSend callbacks did not all come");
        }
        for (int idx = 0; idx < 3; idx++) {
            Message<String> message = MessageBuilder.withPayload("tx-" + idx)
                .setHeader("origin", "spring")
                .setHeader("idx", String.valueOf(idx))
                .build();
            TransactionSendResult result = template.sendMessageInTransaction(txTopic, message, idx);
            Map<String, Object> entry = sentEntry("transaction", idx, "", result);
            entry.put("localState", String.valueOf(result.getLocalTransactionState()));
            synchronized (sent) {
                sent.add(entry);
            }
        }
        // What each listener should end with: all 2*COUNT, the TagA half, idx >= 3, and the
        // two committed transactions.
        int tagged = count;
        int selected = Math.max(0, 2 * count - 3);
        long until = System.currentTimeMillis() + deadlineS * 1000L;
        while (System.currentTimeMillis() < until
            && !(received("all") >= 2 * count && received("tags") >= tagged
                && received("sql") >= selected && received("tx") >= 2)) {
            Thread.sleep(100);
        }
        if (System.currentTimeMillis() >= until) {
            ERRORS.add("deadline passed: all " + received("all") + ", tags " + received("tags")
                + ", sql " + received("sql") + ", tx " + received("tx"));
        }
        // A duplicate or a rolled-back transaction would come by now.
        Thread.sleep(2000);
        printSummary(sent);
    }

    static long received(String listener) {
        return RECEIVED.stream().filter(r -> listener.equals(r.get("listener"))).count();
    }

    static Map<String, Object> sentEntry(String kind, int idx, String tag, SendResult result) {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("kind", kind);
        entry.put("idx", idx);
        entry.put("tag", tag);
        entry.put("msgId", result.getMsgId());
        entry.put("status", String.valueOf(result.getSendStatus()));
        return entry;
    }

    static void printSummary(List<Map<String, Object>> sent) {
        Map<String, Object> summary = new LinkedHashMap<>();
        synchronized (sent) {
            summary.put("sent", new ArrayList<>(sent));
        }
        summary.put("received", new ArrayList<>(RECEIVED));
        summary.put("checks", new ArrayList<>(CHECKS));
        summary.put("errors", new ArrayList<>(ERRORS));
        System.out.println(JSON.toJSONString(summary));
        System.out.flush();
    }

    static void record(String listener, MessageExt message) {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("listener", listener);
        entry.put("msgId", message.getMsgId());
        entry.put("idx", message.getUserProperty("idx"));
        entry.put("tag", message.getTags());
        entry.put("topic", message.getTopic());
        entry.put("body", new String(message.getBody(), StandardCharsets.UTF_8));
        entry.put("origin", message.getUserProperty("origin"));
        RECEIVED.add(entry);
    }

    /** Every listener starts from the first offset: a group new to the broker misses nothing. */
    abstract static class FromFirstOffset
        implements RocketMQListener<MessageExt>, RocketMQPushConsumerLifecycleListener {
        public void prepareStart(DefaultMQPushConsumer consumer) {
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        }
    }

    @Component
    @RocketMQMessageListener(topic = "${skiff.topic}", consumerGroup = "${skiff.group}-all")
    static class AllListener extends FromFirstOffset {
        public void onMessage(MessageExt message) {
            record("all", message);
        }
    }

    @Component
    @RocketMQMessageListener(topic = "${skiff.topic}", consumerGroup = "${skiff.group}-tags",
        selectorType = SelectorType.TAG, selectorExpression = "TagA")
    static class TagListener extends FromFirstOffset {
        public void onMessage(MessageExt message) {
            record("tags", message);
        }
    }

    @Component
    @RocketMQMessageListener(topic = "${skiff.topic}", consumerGroup = "${skiff.group}-sql",
        selectorType = SelectorType.SQL92, selectorExpression = "origin = 'spring' AND idx >= 3")
    static class SqlListener extends FromFirstOffset {
        public void onMessage(MessageExt message) {
            record("sql", message);
        }
    }

    @Component
    @RocketMQMessageListener(topic = "${skiff.tx-topic}", consumerGroup = "${skiff.group}-tx")
    static class TxListener extends FromFirstOffset {
        public void onMessage(MessageExt message) {
            record("tx", message);
        }
    }

    @RocketMQTransactionListener
    static class LocalTransactions implements RocketMQLocalTransactionListener {
        public RocketMQLocalTransactionState executeLocalTransaction(Message message, Object arg) {
            int idx = (Integer) arg;
            return idx == 0 ? RocketMQLocalTransactionState.COMMIT
                : idx == 1 ? RocketMQLocalTransactionState.ROLLBACK
                : RocketMQLocalTransactionState.UNKNOWN;
        }

        public RocketMQLocalTransactionState checkLocalTransaction(Message message) {
            Object idx = message.getHeaders().get("idx");
            Map<String, Object> check = new LinkedHashMap<>();
            // The half message's own ID, as its send answered it.
            check.put("msgId", String.valueOf(
                message.getHeaders().get(RocketMQHeaders.PREFIX + RocketMQHeaders.TRANSACTION_ID)));
            check.put("idx", String.valueOf(idx));
            CHECKS.add(check);
            return "1".equals(String.valueOf(idx)) ? RocketMQLocalTransactionState.ROLLBACK
                : RocketMQLocalTransactionState.COMMIT;
        }
    }
}

// The classic RocketMQ client (rocketmq-client and rocketmq-acl 4.x) against a name-server
// address with ACL signatures and TLS; compiled with RemotingClient.java, whose helpers and
// summary lists it shares. Prints one JSON object on stdout.
//
// java RemotingSecurityClient MODE --namesrv HOST:PORT --topic T [--group G] [--count N] ...
//
// Modes:
//   acl  with --access-key/--secret-key (a user with Pub and Sub on TOPIC, Sub on GROUP and
//        Sub only on --denied-topic), every client signed by AclClientRPCHook:
//        a producer sends COUNT messages to TOPIC ("sent") and a push consumer of GROUP
//        receives them ("received"); then "refusals", one per case, each {"case",
//        "routeCode", "routeRemark", "sendCode", "sendRemark"} (code 0: not refused):
//        "denied-topic" (the user sends to --denied-topic), "unsigned" (no hook),
//        "wrong-secret", "disabled" (--disabled-key/--disabled-secret, a disabled user),
//        and "denied-group" (a pull consumer of --denied-group pulls TOPIC; its codes are
//        the route's and the pull's)
//   tls  a producer with TLS on and one with it off each send COUNT messages to TOPIC
//        (kinds "tls" and "plain"); then a push consumer with TLS on (GROUP) and one with
//        it off (GROUP-plain) each receive them all: "received" entries are
//        {"consumer", "message"}
// Each client has an instance name of its own: the client shares one connection factory
// (and its hook and TLS setting) between clients of the same instance name.
// Exit status 0 when no error occurred.

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

public class RemotingSecurityClient {
    static final List<String> refusals = Collections.synchronizedList(new ArrayList<>());

    public static void main(String[] args) throws Exception {
        // Trust any certificate the broker shows (the client's test mode), before any
        // client class reads these.
        System.setProperty("tls.test.mode.enable", "true");
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
                case "acl":
                    acl(namesrv, topic, group, count, deadlineMs, options);
                    break;
                case "tls":
                    tls(namesrv, topic, group, count, deadlineMs);
                    break;
                default:
                    RemotingClient.errors.add("unknown mode " + mode);
            }
        } catch (Throwable t) {
            RemotingClient.errors.add(t.toString());
        }
        StringBuilder out = new StringBuilder("{\"sent\": [");
        out.append(String.join(", ", RemotingClient.sent)).append("], \"received\": [");
        out.append(String.join(", ", RemotingClient.received)).append("], \"refusals\": [");
        out.append(String.join(", ", refusals)).append("], \"errors\": [");
        List<String> quoted = new ArrayList<>();
        for (String e : RemotingClient.errors) {
            quoted.add(RemotingClient.quote(e));
        }
        out.append(String.join(", ", quoted)).append("]}");
        System.out.println(out);
        System.out.flush();
        System.exit(RemotingClient.errors.isEmpty() ? 0 : 1);
    }

    static RPCHook signer(String accessKey, String secretKey) {
        return new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }

    static DefaultMQProducer producer(String namesrv, String group, String instance, RPCHook hook,
        boolean tls) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group, hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance);
        producer.setUseTLS(tls);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        return producer;
    }

    static DefaultMQPushConsumer consumer(String namesrv, String topic, String group, String instance,
        RPCHook hook, boolean tls, CountDownLatch arrived) throws Exception {
        DefaultMQPushConsumer consumer = hook == null ? new DefaultMQPushConsumer(group)
            : new DefaultMQPushConsumer(group, hook, new org.apache.rocketmq.client.consumer.rebalance
                .AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setUseTLS(tls);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                RemotingClient.received.add("{\"consumer\": " + RemotingClient.quote(instance)
                    + ", \"message\": " + RemotingClient.view(message) + "}");
                arrived.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        return consumer;
    }

    // The broker's own answer where the client wrapped it (a send's retries do).
    static Throwable answered(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof MQBrokerException) {
                return t;
            }
        }
        return e;
    }

    static String remarkOf(Throwable e) {
        Throwable t = answered(e);
        if (t instanceof MQBrokerException) {
            return ((MQBrokerException) t).getErrorMessage();
        }
        return t instanceof MQClientException ? ((MQClientException) t).getErrorMessage() : t.toString();
    }

    static int codeOf(Throwable thrown) {
        Throwable e = answered(thrown);
        if (e instanceof MQBrokerException) {
            return ((MQBrokerException) e).getResponseCode();
        }
        if (e instanceof MQClientException) {
            return ((MQClientException) e).getResponseCode();
        }
        return -2;
    }

    static String refusedRoute(DefaultMQProducer producer, String topic) {
        try {
            producer.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl()
                .getTopicRouteInfoFromNameServer(topic, 3000);
            return "\"routeCode\": 0";
        } catch (Exception e) {
            return "\"routeCode\": " + codeOf(e) + ", \"routeRemark\": " + RemotingClient.quote(remarkOf(e));
        }
    }

    static void refusedSend(String name, String namesrv, String topic, String group, RPCHook hook)
        throws Exception {
        DefaultMQProducer producer = producer(namesrv, group, name, hook, false);
        try {
            String entry = "{\"case\": " + RemotingClient.quote(name) + ", " + refusedRoute(producer, topic);
            try {
                producer.send(RemotingClient.message(topic, "TagA", "refused", 0));
                entry += ", \"sendCode\": 0";
            } catch (Exception e) {
                entry += ", \"sendCode\": " + codeOf(e) + ", \"sendRemark\": "
                    + RemotingClient.quote(remarkOf(e));
            }
            refusals.add(entry + "}");
        } finally {
            producer.shutdown();
        }
    }

    static void acl(String namesrv, String topic, String group, int count, long deadlineMs,
        Map<String, String> options) throws Exception {
        RPCHook signed = signer(options.get("access-key"), options.get("secret-key"));
        DefaultMQProducer producer = producer(namesrv, group + "-producer", "signed-producer", signed, false);
        try {
            for (int i = 0; i < count; i++) {
                RemotingClient.record("sync", producer.send(RemotingClient.message(topic, "TagA", "signed-" + i, i)),
                    "TagA", i);
            }
        } finally {
            producer.shutdown();
        }
        CountDownLatch arrived = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = consumer(namesrv, topic, group, "signed-consumer", signed, false, arrived);
        try {
            if (!arrived.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                RemotingClient.errors.add("the signed consumer received " + RemotingClient.received.size()
                    + " of " + count + " messages");
            }
        } finally {
            consumer.shutdown();
        }
        refusedSend("denied-topic", namesrv, options.get("denied-topic"), group + "-producer", signed);
        refusedSend("unsigned", namesrv, topic, group + "-producer", null);
        refusedSend("wrong-secret", namesrv, topic, group + "-producer",
            signer(options.get("access-key"), options.get("secret-key") + "-wrong"));
        refusedSend("disabled", namesrv, topic, group + "-producer",
            signer(options.get("disabled-key"), options.get("disabled-secret")));
        DefaultMQPullConsumer puller = new DefaultMQPullConsumer(options.get("denied-group"), signed);
        puller.setNamesrvAddr(namesrv);
        puller.setInstanceName("denied-group");
        puller.start();
        try {
            String entry = "{\"case\": \"denied-group\"";
            Set<MessageQueue> queues = puller.fetchSubscribeMessageQueues(topic);
            entry += ", \"routeCode\": 0";
            try {
                puller.pull(queues.iterator().next(), "*", 0, 32);
                entry += ", \"sendCode\": 0";
            } catch (Exception e) {
                entry += ", \"sendCode\": " + codeOf(e) + ", \"sendRemark\": "
                    + RemotingClient.quote(remarkOf(e));
            }
            refusals.add(entry + "}");
        } finally {
            puller.shutdown();
        }
    }

    static void tls(String namesrv, String topic, String group, int count, long deadlineMs) throws Exception {
        for (boolean tls : new boolean[] {true, false}) {
            String kind = tls ? "tls" : "plain";
            DefaultMQProducer producer = producer(namesrv, group + "-producer-" + kind, kind + "-producer", null, tls);
            try {
                for (int i = 0; i < count; i++) {
                    RemotingClient.record(kind,
                        producer.send(RemotingClient.message(topic, "TagA", kind + "-" + i, i)), "TagA", i);
                }
            } finally {
                producer.shutdown();
            }
        }
        CountDownLatch arrived = new CountDownLatch(4 * count);
        DefaultMQPushConsumer overTls = consumer(namesrv, topic, group, "tls", null, true, arrived);
        DefaultMQPushConsumer plain = consumer(namesrv, topic, group + "-plain", "plain", null, false, arrived);
        try {
            if (!arrived.await(deadlineMs, TimeUnit.MILLISECONDS)) {
                RemotingClient.errors.add("the consumers received " + RemotingClient.received.size()
                    + " of " + (4 * count) + " messages");
            }
        } finally {
            overTls.shutdown();
            plain.shutdown();
        }
    }
}

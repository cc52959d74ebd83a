// The official RocketMQ Java client 5.x against one endpoint, printing a JSON summary on stdout.
//
// java OfficialClient MODE --endpoint HOST:PORT --topic T [--group G] [--count N]
//     [--access-key K --secret-key S] [--tls on|off] [--size BYTES] [--in-flight N]
//     [--threads N] [--deadline-s S] [--rate R] [--warmup-s S]
//
// Modes:
//   roundtrip      send COUNT messages one by one, then receive them with a SimpleConsumer
//                  (ack each) until all came back or the deadline passed:
//                  {"sent": [ids], "received": [ids], "errors": [text]}
//   transaction    send one message in a transaction left open, answer the broker's check
//                  of it with COMMIT, then receive it with a SimpleConsumer (ack it):
//                  {"sent": [id], "checked": [ids], "received": [ids], "errors": [text]}
//   sql92          on TOPIC and on FIFO_TOPIC (its messages in one message group), send five
//                  messages with the property run=RUN and these a and b:
//                  match-1 (a=7 b=x), below (a=3 b=x), missing (b=x), mismatch (a=seven b=x),
//                  match-2 (a=9 b=x); then, all at once, SimpleConsumers of fresh groups
//                  (GROUP-<topic>-<name>) subscribed with "run = 'RUN' AND (<expression>)" for
//                  each of SQL_EXPRESSIONS ("match": a > 5 AND b = 'x', "null": a IS NULL,
//                  "not": NOT (a > 5)), a PushConsumer with "match", and a SimpleConsumer with
//                  "a > > 1", whose receive must fail; each takes until it has been quiet
//                  for a poll after its first message (or the deadline):
//                  {"topics": {topic: {"sent": {case: id}, "simple": {name: [ids]},
//                  "push": {name: [ids]}, "refused": text}}, "errors": [text]}
//   send-async     COUNT sendAsync calls, IN_FLIGHT unacknowledged at most
//   send-blocking  COUNT blocking sends spread over THREADS threads; with RATE > 0 they
//                  start at RATE per second (latency from each send's own start)
//   drain          receive and ack COUNT messages with THREADS threads
//   push-e2e       a PushConsumer of GROUP on TOPIC, then COUNT sendAsync
//                  calls paced at RATE per second, once a few warm-up messages came back
//                  and WARMUP_S seconds of sends at RATE went unmeasured just before them
//                  (the JVM compiles the client's hot paths in its first seconds, on the
//                  same CPUs as the broker); latencies are from each send to its delivery
//                  to the consumer's listener, in this one process
//                  the last four print {"messages", "seconds", "cpu_seconds",
//                  "latencies_s", "errors", "unmeasured_messages", "last_error"}; latencies
//                  are per send (push-e2e: in send order), empty for drain; cpu_seconds is
//                  this JVM's CPU over the measured work; unmeasured_messages counts the
//                  push-e2e warm-up messages delivered (0 elsewhere).
// The client configuration keeps the client's defaults (TLS on, the server certificate not
// verified) unless --tls off or credentials are given. Exit status 0 when no error occurred.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public final class OfficialClient {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    // The broker refuses long polls shorter than this; the receive deadline goes beyond it.
    private static final Duration AWAIT = Duration.ofSeconds(5);
    private static final Duration INVISIBLE = Duration.ofSeconds(30);

    private final Map<String, String> options;
    private final List<String> errors = Collections.synchronizedList(new ArrayList<>());
    // This JVM's CPU time when the measured work began (all its threads, the client's own).
    private long cpuAtStart;

    private OfficialClient(Map<String, String> options) {
        this.options = options;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        OfficialClient client = new OfficialClient(options);
        String json;
        switch (args[0]) {
            case "roundtrip":
                json = client.roundtrip();
                break;
            case "transaction":
                json = client.transaction();
                break;
            case "sql92":
                json = client.sql92();
                break;
            case "send-async":
                json = client.sendAsync();
                break;
            case "send-blocking":
                json = client.sendBlocking();
                break;
            case "drain":
                json = client.drain();
                break;
            case "push-e2e":
                json = client.pushEndToEnd();
                break;
            case "fifo-partial-ack":
                json = client.fifoPartialAck();
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + args[0]);
        }
        System.out.println(json);
        System.out.flush();
        // The client's own threads (telemetry, schedulers) must not keep the JVM alive.
        Runtime.getRuntime().halt(client.errors.isEmpty() ? 0 : 1);
    }

    private String option(String name, String fallback) {
        return options.getOrDefault(name, fallback);
    }

    private int number(String name, int fallback) {
        return Integer.parseInt(option(name, Integer.toString(fallback)));
    }

    private ClientConfiguration configuration() {
        ClientConfigurationBuilder builder =
                ClientConfiguration.newBuilder().setEndpoints(option("endpoint", ""));
        if (options.containsKey("access-key")) {
            builder.setCredentialProvider(
                    new StaticSessionCredentialsProvider(
                            options.get("access-key"), option("secret-key", "")));
        }
        if (options.containsKey("tls")) {
            builder.enableSsl(!"off".equals(options.get("tls")));
        }
        return builder.build();
    }

    private Producer producer() throws Exception {
        return PROVIDER.newProducerBuilder()
                .setClientConfiguration(configuration())
                .setTopics(option("topic", ""))
                .build();
    }

    private SimpleConsumer consumer() throws Exception {
        return PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(configuration())
                .setConsumerGroup(option("group", ""))
                .setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(
                        Collections.singletonMap(option("topic", ""), FilterExpression.SUB_ALL))
                .build();
    }

    private Message message(byte[] body) {
        return PROVIDER.newMessageBuilder().setTopic(option("topic", "")).setBody(body).build();
    }

    // A client that fails to start wraps the broker's answer in its causes: report them all.
    private void error(String stage, Throwable failure) {
        StringBuilder text = new StringBuilder(stage).append(": ").append(failure);
        for (Throwable cause = failure.getCause(); cause != null; cause = cause.getCause()) {
            text.append("; caused by ").append(cause);
        }
        errors.add(text.toString());
    }

    private String roundtrip() {
        int count = number("count", 10);
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        List<String> sent = new ArrayList<>();
        Set<String> received = new LinkedHashSet<>();
        try (Producer producer = producer()) {
            for (int i = 0; i < count; i++) {
                byte[] body = ("message-" + i).getBytes(StandardCharsets.UTF_8);
                sent.add(producer.send(message(body)).getMessageId().toString());
            }
        } catch (Throwable failure) {
            error("send", failure);
        }
        receiveAll(sent, received, deadline);
        return "{\"sent\": " + strings(sent) + ", \"received\": " + strings(received)
                + ", \"errors\": " + strings(errors) + "}";
    }

    // Receive (and ack) with a SimpleConsumer until every one of sent came back.
    private void receiveAll(List<String> sent, Set<String> received, long deadline) {
        if (sent.isEmpty()) {
            return;
        }
        try (SimpleConsumer consumer = consumer()) {
            while (received.size() < sent.size() && System.nanoTime() < deadline) {
                for (MessageView view : consumer.receive(16, INVISIBLE)) {
                    consumer.ack(view);
                    received.add(view.getMessageId().toString());
                }
            }
        } catch (Throwable failure) {
            error("receive", failure);
        }
    }

    // From a FIFO topic: receive a batch of count invisible for invisible-s, ack all but its
    // first, receive again; "again" lists what came then as id/deliveryAttempt.
    private String fifoPartialAck() {
        int count = number("count", 3);
        Duration firstInvisible = Duration.ofSeconds(number("invisible-s", 30));
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        List<String> received = new ArrayList<>();
        List<String> again = new ArrayList<>();
        try (SimpleConsumer consumer = consumer()) {
            List<MessageView> first = receiveSome(consumer, count, firstInvisible, deadline);
            for (MessageView view : first) {
                received.add(view.getMessageId().toString());
            }
            for (MessageView view : first.subList(Math.min(1, first.size()), first.size())) {
                consumer.ack(view);
            }
            for (MessageView view : receiveSome(consumer, count, INVISIBLE, deadline)) {
                again.add(view.getMessageId() + "/" + view.getDeliveryAttempt());
                consumer.ack(view);
            }
        } catch (Throwable failure) {
            error("fifo", failure);
        }
        return "{\"received\": " + strings(received) + ", \"again\": " + strings(again)
                + ", \"errors\": " + strings(errors) + "}";
    }

    // Receive until a receive brings messages or the deadline passes.
    private static List<MessageView> receiveSome(
            SimpleConsumer consumer, int count, Duration invisible, long deadline)
            throws Exception {
        while (System.nanoTime() < deadline) {
            List<MessageView> views = consumer.receive(count, invisible);
            if (!views.isEmpty()) {
                return views;
            }
        }
        return Collections.emptyList();
    }

    private String transaction() {
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        List<String> sent = new ArrayList<>();
        List<String> checked = Collections.synchronizedList(new ArrayList<>());
        Set<String> received = new LinkedHashSet<>();
        try (Producer producer = PROVIDER.newProducerBuilder()
                .setClientConfiguration(configuration())
                .setTopics(option("topic", ""))
                .setTransactionChecker(view -> {
                    checked.add(view.getMessageId().toString());
                    return TransactionResolution.COMMIT;
                })
                .build()) {
            Transaction transaction = producer.beginTransaction();
            byte[] body = "in a transaction".getBytes(StandardCharsets.UTF_8);
            sent.add(producer.send(message(body), transaction).getMessageId().toString());
            // Neither committed nor rolled back here: the broker has to ask this producer.
            while (checked.isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
        } catch (Throwable failure) {
            error("transaction", failure);
        }
        if (checked.isEmpty()) {
            errors.add("the broker never checked the open transaction");
        } else {
            receiveAll(sent, received, deadline);
        }
        return "{\"sent\": " + strings(sent) + ", \"checked\": " + strings(checked)
                + ", \"received\": " + strings(received) + ", \"errors\": " + strings(errors)
                + "}";
    }

    // name -> expression, and the cases sent: name -> {a or null, b}.
    private static final String[][] SQL_EXPRESSIONS = {
        {"match", "a > 5 AND b = 'x'"}, {"null", "a IS NULL"}, {"not", "NOT (a > 5)"},
    };
    private static final String[][] SQL_CASES = {
        {"match-1", "7", "x"}, {"below", "3", "x"}, {"missing", null, "x"},
        {"mismatch", "seven", "x"}, {"match-2", "9", "x"},
    };
    private static final String BAD_SQL = "a > > 1";

    private String sql92() throws Exception {
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        String run = option("run", "run");
        List<String> topics = List.of(option("topic", ""), option("fifo-topic", ""));
        Map<String, Map<String, String>> sent = new LinkedHashMap<>();
        for (String topic : topics) {
            sent.put(topic, sendCases(topic, topic.equals(topics.get(1)), run));
        }
        Map<String, Future<String>> results = new LinkedHashMap<>();
        ExecutorService pool = Executors.newCachedThreadPool();
        for (String topic : topics) {
            for (String[] expression : SQL_EXPRESSIONS) {
                String sql = "run = '" + run + "' AND (" + expression[1] + ")";
                String group = option("group", "") + "-" + topic + "-" + expression[0];
                results.put(topic + " simple " + expression[0],
                        pool.submit(() -> strings(simpleSql(topic, group, sql, deadline))));
            }
            String sql = "run = '" + run + "' AND (" + SQL_EXPRESSIONS[0][1] + ")";
            String pushGroup = option("group", "") + "-" + topic + "-push";
            results.put(topic + " push match",
                    pool.submit(() -> strings(pushSql(topic, pushGroup, sql, deadline))));
            String badGroup = option("group", "") + "-" + topic + "-bad";
            results.put(topic + " refused",
                    pool.submit(() -> quoted(refusedSql(topic, badGroup))));
        }
        StringBuilder out = new StringBuilder("{\"topics\": {");
        for (String topic : topics) {
            out.append(topic.equals(topics.get(0)) ? "" : ", ").append(quoted(topic))
                    .append(": {\"sent\": {");
            String separator = "";
            for (Map.Entry<String, String> entry : sent.get(topic).entrySet()) {
                out.append(separator).append(quoted(entry.getKey())).append(": ")
                        .append(quoted(entry.getValue()));
                separator = ", ";
            }
            out.append("}, \"simple\": {");
            separator = "";
            for (String[] expression : SQL_EXPRESSIONS) {
                out.append(separator).append(quoted(expression[0])).append(": ")
                        .append(results.get(topic + " simple " + expression[0]).get());
                separator = ", ";
            }
            out.append("}, \"push\": {\"match\": ")
                    .append(results.get(topic + " push match").get())
                    .append("}, \"refused\": ").append(results.get(topic + " refused").get())
                    .append("}");
        }
        pool.shutdown();
        return out.append("}, \"errors\": ").append(strings(errors)).append("}").toString();
    }

    private Map<String, String> sendCases(String topic, boolean fifo, String run) {
        Map<String, String> ids = new LinkedHashMap<>();
        try (Producer producer = PROVIDER.newProducerBuilder()
                .setClientConfiguration(configuration())
                .setTopics(topic)
                .build()) {
            for (String[] sqlCase : SQL_CASES) {
                org.apache.rocketmq.client.apis.message.MessageBuilder builder =
                        PROVIDER.newMessageBuilder()
                                .setTopic(topic)
                                .setBody(sqlCase[0].getBytes(StandardCharsets.UTF_8))
                                .addProperty("run", run)
                                .addProperty("b", sqlCase[2]);
                if (sqlCase[1] != null) {
                    builder.addProperty("a", sqlCase[1]);
                }
                if (fifo) {
                    builder.setMessageGroup("sql92-group");
                }
                ids.put(sqlCase[0], producer.send(builder.build()).getMessageId().toString());
            }
        } catch (Throwable failure) {
            error("send to " + topic, failure);
        }
        return ids;
    }

    private List<String> simpleSql(String topic, String group, String sql, long deadline) {
        List<String> received = new ArrayList<>();
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(configuration())
                .setConsumerGroup(group)
                .setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(Collections.singletonMap(
                        topic, new FilterExpression(sql, FilterExpressionType.SQL92)))
                .build()) {
            while (System.nanoTime() < deadline) {
                List<MessageView> views = consumer.receive(16, INVISIBLE);
                if (views.isEmpty() && !received.isEmpty()) {
                    break; // quiet for a whole poll after the first message
                }
                for (MessageView view : views) {
                    consumer.ack(view);
                    received.add(view.getMessageId().toString());
                }
            }
        } catch (Throwable failure) {
            error("simple consumer " + group, failure);
        }
        return received;
    }

    private List<String> pushSql(String topic, String group, String sql, long deadline) {
        List<String> received = Collections.synchronizedList(new ArrayList<>());
        try (PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(configuration())
                .setConsumerGroup(group)
                .setSubscriptionExpressions(Collections.singletonMap(
                        topic, new FilterExpression(sql, FilterExpressionType.SQL92)))
                .setMessageListener(view -> {
                    received.add(view.getMessageId().toString());
                    return ConsumeResult.SUCCESS;
                })
                .build()) {
            // As the simple consumers: quiet for a poll's length after the first message.
            int seen = -1;
            long quietSince = System.nanoTime();
            while (System.nanoTime() < deadline) {
                Thread.sleep(200);
                int now = received.size();
                if (now != seen) {
                    seen = now;
                    quietSince = System.nanoTime();
                } else if (now > 0 && System.nanoTime() - quietSince > AWAIT.toNanos()) {
                    break;
                }
            }
        } catch (Throwable failure) {
            error("push consumer " + group, failure);
        }
        synchronized (received) {
            return new ArrayList<>(received);
        }
    }

    // The error a receive with an expression that does not parse meets ("" if none).
    private String refusedSql(String topic, String group) {
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(configuration())
                .setConsumerGroup(group)
                .setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(Collections.singletonMap(
                        topic, new FilterExpression(BAD_SQL, FilterExpressionType.SQL92)))
                .build()) {
            consumer.receive(16, INVISIBLE);
        } catch (Throwable failure) {
            StringBuilder text = new StringBuilder(failure.toString());
            for (Throwable cause = failure.getCause(); cause != null; cause = cause.getCause()) {
                text.append("; caused by ").append(cause);
            }
            return text.toString();
        }
        return "";
    }

    private String sendAsync() throws Exception {
        int count = number("count", 1000);
        Semaphore window = new Semaphore(number("in-flight", 256));
        byte[] body = new byte[number("size", 1024)];
        double[] latencies = new double[count];
        AtomicInteger done = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        CountDownLatch finished = new CountDownLatch(count);
        long start;
        try (Producer producer = producer()) {
            start = begin();
            for (int i = 0; i < count; i++) {
                window.acquire();
                int index = i;
                long sentAt = System.nanoTime();
                producer.sendAsync(message(body)).whenComplete((receipt, failure) -> {
                    latencies[index] = (System.nanoTime() - sentAt) / 1e9;
                    if (failure != null) {
                        failed.incrementAndGet();
                        error("sendAsync", failure);
                    } else {
                        done.incrementAndGet();
                    }
                    window.release();
                    finished.countDown();
                });
            }
            finished.await();
        }
        return rates(done.get(), start, latencies, failed.get());
    }

    private String sendBlocking() throws Exception {
        int count = number("count", 1000);
        int threads = number("threads", 16);
        byte[] body = new byte[number("size", 1024)];
        // RATE > 0: send i starts no earlier than i / RATE seconds after the start (an
        // offered rate, as long as the threads keep up); 0: each thread sends at once.
        double rate = Double.parseDouble(option("rate", "0"));
        double[] latencies = new double[count];
        AtomicInteger next = new AtomicInteger();
        AtomicInteger done = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        long start;
        try (Producer producer = producer()) {
            List<Thread> workers = new ArrayList<>();
            start = begin();
            long paceFrom = System.nanoTime();
            for (int t = 0; t < threads; t++) {
                Thread worker = new Thread(() -> {
                    for (int i = next.getAndIncrement(); i < count; i = next.getAndIncrement()) {
                        if (rate > 0) {
                            long due = paceFrom + (long) (i * 1e9 / rate);
                            for (long wait = due - System.nanoTime(); wait > 0;
                                    wait = due - System.nanoTime()) {
                                LockSupport.parkNanos(wait);
                            }
                        }
                        long sentAt = System.nanoTime();
                        try {
                            producer.send(message(body));
                            done.incrementAndGet();
                        } catch (Throwable failure) {
                            failed.incrementAndGet();
                            error("send", failure);
                        }
                        latencies[i] = (System.nanoTime() - sentAt) / 1e9;
                    }
                });
                worker.start();
                workers.add(worker);
            }
            for (Thread worker : workers) {
                worker.join();
            }
        }
        return rates(done.get(), start, latencies, failed.get());
    }

    private String drain() throws Exception {
        int count = number("count", 1000);
        int threads = number("threads", 8);
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        AtomicInteger got = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        long start;
        try (SimpleConsumer consumer = consumer()) {
            List<Thread> workers = new ArrayList<>();
            start = begin();
            for (int t = 0; t < threads; t++) {
                Thread worker = new Thread(() -> {
                    while (got.get() < count && System.nanoTime() < deadline) {
                        try {
                            for (MessageView view : consumer.receive(32, INVISIBLE)) {
                                consumer.ack(view);
                                got.incrementAndGet();
                            }
                        } catch (Throwable failure) {
                            failed.incrementAndGet();
                            error("receive", failure);
                        }
                    }
                });
                worker.start();
                workers.add(worker);
            }
            for (Thread worker : workers) {
                worker.join();
            }
        }
        return rates(Math.min(got.get(), count), start, new double[0], failed.get());
    }

    // Each body starts with its index and the nanoTime of its send; the listener, in the same
    // JVM, notes the first delivery of each index.
    private String pushEndToEnd() throws Exception {
        int count = number("count", 1000);
        double rate = Double.parseDouble(option("rate", "1000"));
        int size = Math.max(20, number("size", 1024));
        // Messages of earlier runs on the topic (a new group reads from the start) are
        // told apart by this run's number in the body.
        long run = new java.util.Random().nextLong();
        long deadline = System.nanoTime() + number("deadline-s", 60) * 1_000_000_000L;
        double[] latencies = new double[count];
        Set<Integer> delivered = ConcurrentHashMap.newKeySet();
        AtomicInteger warmed = new AtomicInteger();
        CountDownLatch all = new CountDownLatch(count);
        AtomicInteger failed = new AtomicInteger();
        long start;
        long end;
        try (PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
                        .setClientConfiguration(configuration())
                        .setConsumerGroup(option("group", ""))
                        .setSubscriptionExpressions(
                                Collections.singletonMap(
                                        option("topic", ""), FilterExpression.SUB_ALL))
                        .setMessageListener(view -> {
                            long now = System.nanoTime();
                            ByteBuffer body = view.getBody();
                            if (body.remaining() < 20 || body.getLong(12) != run) {
                                return ConsumeResult.SUCCESS; // another run's message
                            }
                            int index = body.getInt(0);
                            if (index < 0) {
                                warmed.incrementAndGet();
                            } else if (index < count && delivered.add(index)) {
                                latencies[index] = (now - body.getLong(4)) / 1e9;
                                all.countDown();
                            }
                            return ConsumeResult.SUCCESS;
                        })
                        .build();
                Producer producer = producer()) {
            // Warm-up: the consumer has found its queues and is polling before the
            // measured sends begin (its start-up is not end-to-end latency).
            long warmDeadline = System.nanoTime() + 30_000_000_000L;
            for (int w = 1; System.nanoTime() < warmDeadline; w++) {
                ByteBuffer body = ByteBuffer.allocate(size);
                body.putInt(0, -w).putLong(4, System.nanoTime()).putLong(12, run);
                producer.send(message(body.array()));
                if (warmed.get() >= 3) {
                    break;
                }
                Thread.sleep(100);
            }
            long interval = (long) (1e9 / rate);
            // The warm-up's sends run straight into the measured ones, at the same pace: a
            // backlog the warm-up left behind is measured, not waited out.
            int warmups = (int) (number("warmup-s", 0) * rate);
            long paceStart = System.nanoTime();
            start = paceStart;
            for (int i = -warmups; i < count; i++) {
                if (i == 0) {
                    start = begin();
                }
                long due = paceStart + (i + warmups) * interval;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    LockSupport.parkNanos(wait);
                }
                ByteBuffer body = ByteBuffer.allocate(size);
                // Warm-up sends carry negative indices, as the readiness messages do: the
                // listener counts them as warmed, not as measured.
                body.putInt(0, i).putLong(4, System.nanoTime()).putLong(12, run);
                producer.sendAsync(message(body.array())).whenComplete((receipt, failure) -> {
                    if (failure != null) {
                        failed.incrementAndGet();
                        error("sendAsync", failure);
                    }
                });
            }
            long left = deadline - System.nanoTime();
            all.await(Math.max(left, 0), TimeUnit.NANOSECONDS);
            end = System.nanoTime();
        }
        // In send order, so that a reader can see when in the run the slow ones were sent.
        double[] seen = new double[delivered.size()];
        int n = 0;
        for (int index = 0; index < count && n < seen.length; index++) {
            if (delivered.contains(index)) {
                seen[n++] = latencies[index];
            }
        }
        int failures = failed.get() + (count - seen.length);
        return rates(seen.length, start, end, seen, failures, warmed.get());
    }

    private long begin() {
        cpuAtStart = processCpuNanos();
        return System.nanoTime();
    }

    private static long processCpuNanos() {
        java.lang.management.OperatingSystemMXBean os =
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return 0;
    }

    private String rates(int messages, long start, double[] latencies, int failed) {
        return rates(messages, start, System.nanoTime(), latencies, failed, 0);
    }

    // unmeasured: messages the broker handled beside the measured ones (warm-up sends).
    private String rates(
            int messages, long start, long end, double[] latencies, int failed, int unmeasured) {
        double seconds = (end - start) / 1e9;
        double cpuSeconds = (processCpuNanos() - cpuAtStart) / 1e9;
        StringBuilder list = new StringBuilder("[");
        for (int i = 0; i < latencies.length; i++) {
            list.append(i == 0 ? "" : ",").append(latencies[i]);
        }
        list.append("]");
        String last = errors.isEmpty() ? "" : errors.get(errors.size() - 1);
        // Errors are counted, not failed on: the benchmark reports them in its table.
        errors.clear();
        return "{\"messages\": " + messages + ", \"seconds\": " + seconds + ", \"cpu_seconds\": "
                + cpuSeconds + ", \"latencies_s\": " + list + ", \"errors\": " + failed
                + ", \"unmeasured_messages\": " + unmeasured
                + ", \"last_error\": " + quoted(last) + "}";
    }

    private static String strings(Iterable<String> values) {
        StringBuilder out = new StringBuilder("[");
        synchronized (values) {
            for (String value : values) {
                out.append(out.length() == 1 ? "" : ", ").append(quoted(value));
            }
        }
        return out.append("]").toString();
    }

    private static String quoted(String value) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toCharArray()) {
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

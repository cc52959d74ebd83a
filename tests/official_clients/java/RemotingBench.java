// Throughput workloads of the classic RocketMQ client (rocketmq-client 4.x, remoting protocol)
// against a name-server address, printing one JSON summary on stdout. Unmodified client,
// default settings; the benchmarks run it (bench/peers_bench.py).
//
// java RemotingBench MODE --namesrv HOST:PORT --topic T [--group G] [--count N]
//     [--size BYTES] [--threads N] [--in-flight N] [--deadline-s S]
//
// Modes:
//   send-sync   COUNT DefaultMQProducer.send calls (sync) spread over THREADS threads
//   send-async  COUNT send(message, SendCallback) calls, IN_FLIGHT unanswered at most
//   push        a DefaultMQPushConsumer of GROUP (clustering, from the first offset, the
//               client's default consumption threads and pull batch) consumes TOPIC until
//               COUNT messages came or the deadline passed; the time runs from start()
//               (route, heartbeat, rebalance included) to the COUNTth message
// Every mode prints {"messages", "seconds", "cpu_seconds", "latencies_s", "errors",
// "unmeasured_messages", "last_error"}: latencies are per send (empty for push);
// cpu_seconds is this JVM's CPU over the measured work. Errors are counted, not failed on.

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

public final class RemotingBench {
    private final Map<String, String> options;
    private final AtomicInteger failed = new AtomicInteger();
    private final AtomicReference<String> lastError = new AtomicReference<>("");
    private long cpuAtStart;

    private RemotingBench(Map<String, String> options) {
        this.options = options;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        RemotingBench bench = new RemotingBench(options);
        String json;
        switch (args[0]) {
            case "send-sync":
                json = bench.sendSync();
                break;
            case "send-async":
                json = bench.sendAsync();
                break;
            case "push":
                json = bench.push();
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + args[0]);
        }
        System.out.println(json);
        System.out.flush();
        // The client's scheduler threads must not keep the JVM alive.
        Runtime.getRuntime().halt(0);
    }

    private String option(String name, String fallback) {
        return options.getOrDefault(name, fallback);
    }

    private int number(String name, int fallback) {
        return Integer.parseInt(option(name, Integer.toString(fallback)));
    }

    private DefaultMQProducer producer() throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(option("group", "bench-remoting") + "-producer");
        producer.setNamesrvAddr(option("namesrv", ""));
        producer.start();
        // The route is fetched before the clock starts, as a running application has it.
        producer.fetchPublishMessageQueues(option("topic", ""));
        return producer;
    }

    private Message message(byte[] body) {
        return new Message(option("topic", ""), "bench", body);
    }

    private void error(String what, Throwable failure) {
        failed.incrementAndGet();
        lastError.set(what + ": " + failure);
    }

    private String sendSync() throws Exception {
        int count = number("count", 1000);
        int threads = number("threads", 16);
        byte[] body = new byte[number("size", 1024)];
        double[] latencies = new double[count];
        AtomicInteger next = new AtomicInteger();
        AtomicInteger done = new AtomicInteger();
        DefaultMQProducer producer = producer();
        Thread[] workers = new Thread[threads];
        long start = begin();
        for (int t = 0; t < threads; t++) {
            workers[t] = new Thread(() -> {
                for (int i = next.getAndIncrement(); i < count; i = next.getAndIncrement()) {
                    long sentAt = System.nanoTime();
                    try {
                        producer.send(message(body));
                        done.incrementAndGet();
                    } catch (Throwable failure) {
                        error("send", failure);
                    }
                    latencies[i] = (System.nanoTime() - sentAt) / 1e9;
                }
            });
            workers[t].start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        long end = System.nanoTime();
        producer.shutdown();
        return summary(done.get(), start, end, latencies);
    }

    private String sendAsync() throws Exception {
        int count = number("count", 1000);
        Semaphore window = new Semaphore(number("in-flight", 256));
        byte[] body = new byte[number("size", 1024)];
        double[] latencies = new double[count];
        AtomicInteger done = new AtomicInteger();
        CountDownLatch finished = new CountDownLatch(count);
        DefaultMQProducer producer = producer();
        long start = begin();
        for (int i = 0; i < count; i++) {
            window.acquire();
            int index = i;
            long sentAt = System.nanoTime();
            SendCallback callback = new SendCallback() {
                public void onSuccess(SendResult result) {
                    answered(index, sentAt, true);
                }

                public void onException(Throwable failure) {
                    error("async send", failure);
                    answered(index, sentAt, false);
                }

                private void answered(int index, long sentAt, boolean ok) {
                    latencies[index] = (System.nanoTime() - sentAt) / 1e9;
                    if (ok) {
                        done.incrementAndGet();
                    }
                    window.release();
                    finished.countDown();
                }
            };
            try {
                producer.send(message(body), callback);
            } catch (Throwable failure) {
                error("async send", failure);
                window.release();
                finished.countDown();
            }
        }
        finished.await();
        long end = System.nanoTime();
        producer.shutdown();
        return summary(done.get(), start, end, latencies);
    }

    private String push() throws Exception {
        int count = number("count", 1000);
        long deadlineNs = number("deadline-s", 60) * 1_000_000_000L;
        CountDownLatch all = new CountDownLatch(count);
        AtomicInteger got = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(option("group", "bench-remoting-push"));
        consumer.setNamesrvAddr(option("namesrv", ""));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(option("topic", ""), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (int i = 0; i < messages.size(); i++) {
                got.incrementAndGet();
                all.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long start = begin();
        consumer.start();
        if (!all.await(deadlineNs, TimeUnit.NANOSECONDS)) {
            failed.addAndGet(count - got.get());
            lastError.set("received " + got.get() + " of " + count + " before the deadline");
        }
        long end = System.nanoTime();
        consumer.shutdown();
        return summary(Math.min(got.get(), count), start, end, new double[0]);
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

    private String summary(int messages, long start, long end, double[] latencies) {
        double seconds = (end - start) / 1e9;
        double cpuSeconds = (processCpuNanos() - cpuAtStart) / 1e9;
        StringBuilder list = new StringBuilder("[");
        for (int i = 0; i < latencies.length; i++) {
            list.append(i == 0 ? "" : ",").append(latencies[i]);
        }
        list.append("]");
        return "{\"messages\": " + messages + ", \"seconds\": " + seconds + ", \"cpu_seconds\": "
                + cpuSeconds + ", \"latencies_s\": " + list + ", \"errors\": " + failed.get()
                + ", \"unmeasured_messages\": 0, \"last_error\": " + quoted(lastError.get()) + "}";
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

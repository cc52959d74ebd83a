/*
 * Several mqadmin (rocketmq-tools) commands in one JVM, against a namesrvAddr, with a
 * producer's messages and a live push consumer around them.
 *
 * Usage: MqAdminBatch --namesrv A --topic T --group G --count N [--await-total M]
 *            -- cmd args... -- cmd args...
 *
 * First it sends N messages to T (keys "key-<i>") with DefaultMQProducer and starts a
 * clustering push consumer of G on T that consumes them, so the admin commands find
 * messages, offsets and an online consumer; with --count 0 it does neither. The commands
 * sign their requests as mqadmin does, with the keys in ${rocketmq.home.dir}/conf/tools.yml
 * if that file exists. Each command's argument list may use
 * {offsetMsgId0}, {msgId0}, {key0}, {namesrv} and {clientId} (the consumer's); the program runs
 * MQAdminStartup.main for each with stdout and stderr captured, and prints one JSON line:
 * {"sent": [...], "consumed": n, "commands": [{"args": [...], "out": "...", "err": "..."}]}.
 * With --await-total M it waits (at most a minute) after the commands until the consumer
 * has had M deliveries in all, so a reset's redelivery is counted.
 */

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MqAdminBatch {
    public static void main(String[] args) throws Exception {
        String namesrv = null, topic = null, group = null;
        int count = 0;
        int awaitTotal = 0;
        List<List<String>> commands = new ArrayList<>();
        int i = 0;
        for (; i < args.length && !args[i].equals("--"); i += 2) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                case "--count": count = Integer.parseInt(args[i + 1]); break;
                case "--await-total": awaitTotal = Integer.parseInt(args[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        for (; i < args.length; i++) {
            if (args[i].equals("--")) {
                commands.add(new ArrayList<>());
            } else {
                commands.get(commands.size() - 1).add(args[i]);
            }
        }
        System.setProperty("rocketmq.namesrv.addr", namesrv);
        // A command that fails to parse its options calls System.exit; record it, run on.
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkExit(int status) {
                if (!exiting) {
                    throw new ExitRefused(status);
                }
            }

            @Override
            public void checkPermission(java.security.Permission permission) {
            }
        });

        StringBuilder sent = new StringBuilder("[");
        String offsetMsgId0 = "", msgId0 = "";
        AtomicInteger deliveries = new AtomicInteger();
        DefaultMQPushConsumer consumer = null;
        if (count > 0) {
            String[] ids = new String[2];
            consumer = produceAndConsume(namesrv, topic, group, count, sent, ids, deliveries);
            offsetMsgId0 = ids[0];
            msgId0 = ids[1];
        }
        sent.append("]");
        String clientId = consumer != null ? consumer.buildMQClientId() : "";
        StringBuilder results = new StringBuilder("[");
        PrintStream out = System.out, err = System.err;
        for (int c = 0; c < commands.size(); c++) {
            List<String> argv = new ArrayList<>();
            for (String arg : commands.get(c)) {
                argv.add(arg.replace("{offsetMsgId0}", offsetMsgId0).replace("{msgId0}", msgId0)
                    .replace("{key0}", "key-0").replace("{namesrv}", namesrv)
                    .replace("{clientId}", clientId));
            }
            long started = System.nanoTime();
            ByteArrayOutputStream capturedOut = new ByteArrayOutputStream();
            ByteArrayOutputStream capturedErr = new ByteArrayOutputStream();
            System.setOut(new PrintStream(capturedOut, true, "UTF-8"));
            System.setErr(new PrintStream(capturedErr, true, "UTF-8"));
            try {
                MQAdminStartup.main(argv.toArray(new String[0]));
            } catch (ExitRefused exit) {
                System.err.println("the command exited with status " + exit.status);
            } catch (Throwable t) {
                t.printStackTrace();
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(out);
                System.setErr(err);
            }
            results.append(c == 0 ? "" : ",")
                .append("{\"ms\":").append((System.nanoTime() - started) / 1_000_000)
                .append(",\"args\":[");
            for (int a = 0; a < argv.size(); a++) {
                results.append(a == 0 ? "" : ",").append(quote(argv.get(a)));
            }
            results.append("],\"out\":").append(quote(capturedOut.toString("UTF-8")))
                .append(",\"err\":").append(quote(capturedErr.toString("UTF-8"))).append("}");
        }
        results.append("]");
        long waited = System.nanoTime();
        // A reset moves a live consumer back: wait (bounded) for what it consumes again.
        long until = System.currentTimeMillis() + 60_000;
        while (deliveries.get() < awaitTotal && System.currentTimeMillis() < until) {
            Thread.sleep(100);
        }
        if (consumer != null) {
            consumer.shutdown();
        }
        System.out.println("{\"sent\":" + sent + ",\"consumed\":" + deliveries.get()
            + ",\"redeliveryMs\":" + (System.nanoTime() - waited) / 1_000_000
            + ",\"commands\":" + results + "}");
        exiting = true;
        System.exit(0);
    }

    static volatile boolean exiting = false;

    static final class ExitRefused extends SecurityException {
        final int status;

        ExitRefused(int status) {
            super("exit " + status);
            this.status = status;
        }
    }

    /** Sends ``count`` messages and returns a push consumer that has consumed them. */
    static DefaultMQPushConsumer produceAndConsume(String namesrv, String topic, String group,
        int count, StringBuilder sent, String[] ids, AtomicInteger deliveries) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("mqadmin-batch-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        for (int n = 0; n < count; n++) {
            Message message = new Message(topic, "TagA", "key-" + n,
                ("body-" + n).getBytes(StandardCharsets.UTF_8));
            SendResult result = producer.send(message);
            if (n == 0) {
                ids[0] = result.getOffsetMsgId();
                ids[1] = result.getMsgId();
            }
            sent.append(n == 0 ? "" : ",").append("{\"msgId\":").append(quote(result.getMsgId()))
                .append(",\"offsetMsgId\":").append(quote(result.getOffsetMsgId()))
                .append(",\"queueId\":").append(result.getMessageQueue().getQueueId())
                .append(",\"queueOffset\":").append(result.getQueueOffset()).append("}");
        }
        producer.shutdown();

        CountDownLatch consumed = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            messages.forEach(m -> {
                deliveries.incrementAndGet();
                consumed.countDown();
            });
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        consumed.await(60, TimeUnit.SECONDS);
        // The consumer commits its offsets every few seconds; once it has taken in every
        // message, commit them now and wait for the broker's answer.
        OffsetStore offsets = consumer.getDefaultMQPushConsumerImpl().getOffsetStore();
        Set<MessageQueue> queues = consumer.fetchSubscribeMessageQueues(topic);
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            long total = 0;
            for (MessageQueue queue : queues) {
                total += Math.max(0, offsets.readOffset(queue, ReadOffsetType.READ_FROM_MEMORY));
            }
            if (total >= count) {
                break;
            }
            Thread.sleep(100);
        }
        for (MessageQueue queue : queues) {
            long offset = offsets.readOffset(queue, ReadOffsetType.READ_FROM_MEMORY);
            if (offset >= 0) {
                ((RemoteBrokerOffsetStore) offsets).updateConsumeOffsetToBroker(queue, offset, false);
            }
        }
        return consumer;
    }

    static String quote(String text) {
        StringBuilder quoted = new StringBuilder("\"");
        for (char ch : text.toCharArray()) {
            switch (ch) {
                case '"': quoted.append("\\\""); break;
                case '\\': quoted.append("\\\\"); break;
                case '\n': quoted.append("\\n"); break;
                case '\r': quoted.append("\\r"); break;
                case '\t': quoted.append("\\t"); break;
                default:
                    if (ch < 0x20) {
                        quoted.append(String.format("\\u%04x", (int) ch));
                    } else {
                        quoted.append(ch);
                    }
            }
        }
        return quoted.append("\"").toString();
    }
}

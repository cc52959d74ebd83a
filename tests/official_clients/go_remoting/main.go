// The unmodified RocketMQ Go client v2 (github.com/apache/rocketmq-client-go/v2, remoting
// protocol) driven through one scenario per run, the first argument naming it:
//
//	produce-consume  sync, async, oneway and batch sends; a TagA push consumer and a SQL92 one
//	send             sync sends only (for the gRPC client to read)
//	rebalance        clustering consumers a and b, then c joins, then b leaves
//	broadcast        two broadcasting consumers of one group, each gets every message
//	orderly          two orderly consumers of one group, messages sent per queue in order
//	retry            a consumer that always answers RECONSUME_LATER (maxReconsumeTimes 2)
//	delay            messages sent with delay levels 1 and 2
//	transaction      half messages committed, rolled back or left unknown for the check
//	lite-pull        a pull consumer assigned every queue, polling, then seeking back to 0
//	acl              a signed client sends and consumes; unsigned and wrong-secret ones do not
//	tls              TLS and plaintext producers and consumers on one port
//
// It prints one JSON object on stdout: {"sent": [...], "received": [...], "errors": [...], ...}.
// The client's own log goes to <--log-dir>/rocketmq-go.log, so the output stays readable.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var (
	namesrv     = flag.String("namesrv", "", "the broker's remoting endpoint")
	topic       = flag.String("topic", "", "topic")
	group       = flag.String("group", "", "consumer group")
	count       = flag.Int("count", 4, "messages per kind")
	deadline    = flag.Duration("deadline", 90*time.Second, "how long to wait for anything")
	accessKey   = flag.String("access-key", "", "ACL access key")
	secretKey   = flag.String("secret-key", "", "ACL secret key")
	logDir      = flag.String("log-dir", "", "folder for the client's log")
	useTLS      = flag.Bool("tls", false, "connect with TLS")
	deniedTopic = flag.String("denied-topic", "", "acl: a topic the signed user may not publish to")
)

var (
	mu       sync.Mutex
	sent     = []map[string]any{}
	received = []map[string]any{}
	errs     = []string{}
	extra    = map[string]any{}
	phase    atomic.Int32
)

func fail(format string, args ...any) {
	mu.Lock()
	defer mu.Unlock()
	errs = append(errs, fmt.Sprintf(format, args...))
}

func record(list *[]map[string]any, entry map[string]any) {
	mu.Lock()
	defer mu.Unlock()
	*list = append(*list, entry)
}

func receivedCount(match func(map[string]any) bool) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, r := range received {
		if match(r) {
			n++
		}
	}
	return n
}

// until polls condition every 50 ms; on timeout it records what was awaited and says false.
func until(condition func() bool, what string) bool {
	end := time.Now().Add(*deadline)
	for !condition() {
		if time.Now().After(end) {
			fail("timed out waiting until %s", what)
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func view(m *primitive.MessageExt) map[string]any {
	return map[string]any{
		"msgId": m.MsgId, "offsetMsgId": m.OffsetMsgId, "topic": m.Topic,
		"tag": m.GetTags(), "keys": m.GetKeys(), "body": string(m.Body),
		"queueId": m.Queue.QueueId, "queueOffset": m.QueueOffset,
		"reconsumeTimes": m.ReconsumeTimes, "properties": m.GetProperties(),
		"bornTimestamp": m.BornTimestamp, "storeTimestamp": m.StoreTimestamp,
		"receivedAt": time.Now().UnixMilli(),
	}
}

func message(body, tag string, idx int) *primitive.Message {
	m := primitive.NewMessage(*topic, []byte(body))
	m.WithTag(tag)
	m.WithKeys([]string{"k" + strconv.Itoa(idx)})
	m.WithProperty("origin", "remoting-go")
	m.WithProperty("idx", strconv.Itoa(idx))
	return m
}

func credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: *accessKey, SecretKey: *secretKey}
}

// instances numbers the clients: the Go client shares one connection set (and one set of
// credentials) among clients of one instance name, and stops it when any of them stops.
var instances atomic.Int32

func instance(kind string) string {
	return fmt.Sprintf("%s-%d", kind, instances.Add(1))
}

func newProducer(extraOptions ...producer.Option) (rocketmq.Producer, error) {
	options := append([]producer.Option{
		producer.WithInstanceName(instance("producer")),
		producer.WithNameServer([]string{*namesrv}),
		producer.WithGroupName(*group + "-producer"),
		producer.WithRetry(2),
		producer.WithCredentials(credentials()),
		producer.WithTls(*useTLS),
	}, extraOptions...)
	p, err := rocketmq.NewProducer(options...)
	if err != nil {
		return nil, err
	}
	return p, p.Start()
}

func recordResult(kind, tag string, idx int, m *primitive.Message, r *primitive.SendResult) {
	entry := map[string]any{"kind": kind, "tag": tag, "idx": idx, "body": string(m.Body)}
	if r != nil {
		entry["status"] = statusName(r.Status)
		entry["msgId"] = r.MsgID
		entry["offsetMsgId"] = r.OffsetMsgID
		entry["queueId"] = r.MessageQueue.QueueId
		entry["queueOffset"] = r.QueueOffset
	} else {
		entry["msgId"] = m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
	}
	record(&sent, entry)
}

func statusName(s primitive.SendStatus) string {
	switch s {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return "UNKNOWN_ERROR(" + strconv.Itoa(int(s)) + ")"
}

func tagOf(i int) string {
	if i%2 == 0 {
		return "TagA"
	}
	return "TagB"
}

func sendEveryKind(p rocketmq.Producer) {
	ctx := context.Background()
	for i := 0; i < *count; i++ {
		m := message("sync-"+strconv.Itoa(i), tagOf(i), i)
		r, err := p.SendSync(ctx, m)
		if err != nil {
			fail("sync send %d: %v", i, err)
			continue
		}
		recordResult("sync", tagOf(i), i, m, r)
	}
	var async sync.WaitGroup
	for i := 0; i < *count; i++ {
		m := message("async-"+strconv.Itoa(i), tagOf(i), i)
		async.Add(1)
		idx := i
		err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
			defer async.Done()
			if err != nil {
				fail("async send %d: %v", idx, err)
				return
			}
			recordResult("async", tagOf(idx), idx, m, r)
		}, m)
		if err != nil {
			async.Done()
			fail("async send %d: %v", i, err)
		}
	}
	async.Wait()
	for i := 0; i < *count; i++ {
		m := message("oneway-"+strconv.Itoa(i), tagOf(i), i)
		if err := p.SendOneWay(ctx, m); err != nil {
			fail("oneway send %d: %v", i, err)
			continue
		}
		recordResult("oneway", tagOf(i), i, m, nil)
	}
	batch := []*primitive.Message{}
	for i := 0; i < *count; i++ {
		batch = append(batch, message("batch-"+strconv.Itoa(i), tagOf(i), i))
	}
	r, err := p.SendSync(ctx, batch...)
	if err != nil {
		fail("batch send: %v", err)
		return
	}
	extra["batchResult"] = map[string]any{
		"status": statusName(r.Status), "msgId": r.MsgID, "offsetMsgId": r.OffsetMsgID,
		"queueId": r.MessageQueue.QueueId, "queueOffset": r.QueueOffset,
	}
	for i, m := range batch {
		recordResult("batch", tagOf(i), i, m, nil)
	}
}

type member struct {
	name     string
	consumer interface {
		Start() error
		Shutdown() error
	}
	queues func() int
}

// pushConsumer starts a push consumer named name; listener decides each message's fate.
func pushConsumer(name, group string, selector consumer.MessageSelector,
	listener func(context.Context, *primitive.MessageExt) consumer.ConsumeResult,
	options ...consumer.Option) *member {
	all := append([]consumer.Option{
		consumer.WithNameServer([]string{*namesrv}),
		consumer.WithGroupName(group),
		consumer.WithInstance(instance(name)),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithCredentials(credentials()),
		consumer.WithTls(*useTLS),
	}, options...)
	c, err := consumer.NewPushConsumer(all...)
	if err != nil {
		fail("consumer %s: %v", name, err)
		return nil
	}
	err = c.Subscribe(*topic, selector, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		result := consumer.ConsumeSuccess
		for _, m := range msgs {
			if listener(ctx, m) != consumer.ConsumeSuccess {
				result = consumer.ConsumeRetryLater
			}
		}
		return result, nil
	})
	if err != nil {
		fail("subscribe %s: %v", name, err)
		return nil
	}
	if err := c.Start(); err != nil {
		fail("start consumer %s: %v", name, err)
		return nil
	}
	held := func() int {
		n := 0
		for mq := range c.GetConsumerRunningInfo(false).MQTable {
			if mq.Topic == *topic {
				n++
			}
		}
		return n
	}
	return &member{name: name, consumer: c, queues: held}
}

func collecting(name string) func(context.Context, *primitive.MessageExt) consumer.ConsumeResult {
	return func(_ context.Context, m *primitive.MessageExt) consumer.ConsumeResult {
		record(&received, map[string]any{"consumer": name, "phase": phase.Load(), "message": view(m)})
		return consumer.ConsumeSuccess
	}
}

func byConsumer(name string) func(map[string]any) bool {
	return func(r map[string]any) bool { return r["consumer"] == name }
}

func byPhase(p int32) func(map[string]any) bool {
	return func(r map[string]any) bool { return r["phase"] == p }
}

// routeOf asks for the topic's queues as a pull consumer does: it knows routes only of
// topics it consumes, so a scout subscribes, starts, reads the route and leaves.
func routeOf() []*primitive.MessageQueue {
	scout, err := consumer.NewPullConsumer(consumer.WithNameServer([]string{*namesrv}),
		consumer.WithInstance(instance("scout")),
		consumer.WithGroupName(*group+"-route"), consumer.WithCredentials(credentials()),
		consumer.WithTls(*useTLS))
	if err == nil {
		err = scout.Subscribe(*topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"})
	}
	if err == nil {
		err = scout.Start()
	}
	if err != nil {
		fail("route reader: %v", err)
		return nil
	}
	defer scout.Shutdown()
	queues, err := scout.GetTopicRouteInfo(*topic)
	if err != nil {
		fail("route of %s: %v", *topic, err)
	}
	return queues
}

func produceConsume() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	sendEveryKind(p)
	tagged := pushConsumer("tagged", *group, consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA"}, collecting("tagged"))
	sql := pushConsumer("sql", *group+"-sql", consumer.MessageSelector{Type: consumer.SQL92, Expression: "idx >= 1"}, collecting("sql"))
	wantedA, wantedSQL := 0, 0
	for i := 0; i < *count; i++ {
		if tagOf(i) == "TagA" {
			wantedA += 4
		}
		if i >= 1 {
			wantedSQL += 4
		}
	}
	until(func() bool { return receivedCount(byConsumer("tagged")) >= wantedA }, "every TagA message arrived")
	until(func() bool { return receivedCount(byConsumer("sql")) >= wantedSQL }, "every idx >= 1 message arrived")
	time.Sleep(time.Second) // anything more (a wrong tag, a duplicate) would come meanwhile
	for _, m := range []*member{tagged, sql} {
		if m != nil {
			m.consumer.Shutdown()
		}
	}
}

func sendOnly() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	for i := 0; i < *count; i++ {
		m := message("remoting-go-"+strconv.Itoa(i), "TagA", i)
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			fail("send %d: %v", i, err)
			continue
		}
		recordResult("sync", "TagA", i, m, r)
	}
}

func sendPhase(p rocketmq.Producer, label string, n int32) {
	phase.Store(n)
	for i := 0; i < *count; i++ {
		m := message(label+"-"+strconv.Itoa(i), "TagA", i)
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			fail("send %s %d: %v", label, i, err)
			continue
		}
		recordResult(label, "TagA", i, m, r)
	}
}

// sharing: together the named members hold every queue, each as many as the average
// allocation gives it (they differ by one at most), so the rebalance has settled.
func sharing(all int, members ...*member) func() bool {
	return func() bool {
		total, least, most := 0, all, 0
		for _, m := range members {
			held := m.queues()
			total += held
			least, most = min(least, held), max(most, held)
		}
		return total == all && least > 0 && most-least <= 1
	}
}

// arrived counts the distinct messages received whose body starts with label.
func arrived(label string) int {
	mu.Lock()
	defer mu.Unlock()
	bodies := map[string]bool{}
	for _, r := range received {
		body := r["message"].(map[string]any)["body"].(string)
		if strings.HasPrefix(body, label+"-") {
			bodies[body] = true
		}
	}
	return len(bodies)
}

// rebalance: phase 1 a and b, phase 2 from c's joining, phase 3 from b's leaving; each
// message received is stamped with the phase it was consumed in.
func rebalance() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	all := len(routeOf())
	everything := consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	phase.Store(1)
	a := pushConsumer("a", *group, everything, collecting("a"))
	b := pushConsumer("b", *group, everything, collecting("b"))
	if a == nil || b == nil {
		return
	}
	defer a.consumer.Shutdown()
	bGone := false
	defer func() {
		if !bGone {
			b.consumer.Shutdown()
		}
	}()
	if !until(sharing(all, a, b), "a and b share the queues") {
		return
	}
	sendPhase(p, "shared", 1)
	until(func() bool { return arrived("shared") >= *count }, "the shared messages arrived")
	phase.Store(2)
	c := pushConsumer("c", *group, everything, collecting("c"))
	if c == nil {
		return
	}
	defer c.consumer.Shutdown()
	if !until(sharing(all, a, b, c), "a, b and c share the queues") {
		return
	}
	sendPhase(p, "joined", 2)
	until(func() bool { return arrived("joined") >= *count }, "the messages after c joined arrived")
	b.consumer.Shutdown()
	bGone = true
	phase.Store(3)
	if !until(sharing(all, a, c), "a and c take b's queues over") {
		return
	}
	sendPhase(p, "left", 3)
	until(func() bool { return arrived("left") >= *count }, "the messages after b left arrived")
	time.Sleep(500 * time.Millisecond)
}

func broadcast() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	all := len(routeOf())
	everything := consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	x := pushConsumer("x", *group, everything, collecting("x"), consumer.WithConsumerModel(consumer.BroadCasting))
	y := pushConsumer("y", *group, everything, collecting("y"), consumer.WithConsumerModel(consumer.BroadCasting))
	if x == nil || y == nil {
		return
	}
	defer x.consumer.Shutdown()
	defer y.consumer.Shutdown()
	until(func() bool { return x.queues() == all && y.queues() == all }, "x and y each hold every queue")
	sendPhase(p, "broadcast", 1)
	until(func() bool {
		return receivedCount(byConsumer("x")) >= *count && receivedCount(byConsumer("y")) >= *count
	}, "x and y each got every message")
	time.Sleep(time.Second)
}

// queueByIdx sends each message to the queue its "queue" property names.
type queueByIdx struct{}

func (queueByIdx) Select(m *primitive.Message, queues []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	want, _ := strconv.Atoi(m.GetProperty("queue"))
	for _, q := range queues {
		if q.QueueId == want {
			return q
		}
	}
	return queues[0]
}

func orderly() {
	p, err := newProducer(producer.WithQueueSelector(queueByIdx{}))
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	all := len(routeOf())
	everything := consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	ordered := func(name string) func(context.Context, *primitive.MessageExt) consumer.ConsumeResult {
		return func(ctx context.Context, m *primitive.MessageExt) consumer.ConsumeResult {
			if _, isOrderly := primitive.GetOrderlyCtx(ctx); !isOrderly {
				fail("consumer %s was not called as an orderly consumer", name)
			}
			return collecting(name)(ctx, m)
		}
	}
	a := pushConsumer("a", *group, everything, ordered("a"), consumer.WithConsumerOrder(true))
	b := pushConsumer("b", *group, everything, ordered("b"), consumer.WithConsumerOrder(true))
	if a == nil || b == nil {
		return
	}
	defer a.consumer.Shutdown()
	defer b.consumer.Shutdown()
	if !until(sharing(all, a, b), "a and b share the queues") {
		return
	}
	for i := 0; i < *count; i++ {
		for q := 0; q < all; q++ {
			m := message(fmt.Sprintf("q%d-%d", q, i), "TagA", i)
			m.WithProperty("queue", strconv.Itoa(q))
			r, err := p.SendSync(context.Background(), m)
			if err != nil {
				fail("send q%d-%d: %v", q, i, err)
				continue
			}
			recordResult("sync", "TagA", i, m, r)
		}
	}
	until(func() bool { return receivedCount(func(map[string]any) bool { return true }) >= *count*all },
		"every ordered message arrived")
	time.Sleep(time.Second)
}

func retry() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	sendPhase(p, "retry", 1)
	failing := func(ctx context.Context, m *primitive.MessageExt) consumer.ConsumeResult {
		record(&received, map[string]any{"reconsumeTimes": m.ReconsumeTimes, "message": view(m)})
		if c, ok := primitive.GetConcurrentlyCtx(ctx); ok {
			c.DelayLevelWhenNextConsume = 1 // one second, so the test stays short
		}
		return consumer.ConsumeRetryLater
	}
	c := pushConsumer("r", *group, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, failing,
		consumer.WithMaxReconsumeTimes(2))
	if c == nil {
		return
	}
	defer c.consumer.Shutdown()
	until(func() bool { return receivedCount(func(map[string]any) bool { return true }) >= 3**count },
		"every message was delivered three times")
	time.Sleep(2 * time.Second) // a fourth delivery would come meanwhile
}

func delay() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	defer p.Shutdown()
	c := pushConsumer("d", *group, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, collecting("d"))
	if c == nil {
		return
	}
	defer c.consumer.Shutdown()
	for i := 0; i < *count; i++ {
		level := 1 + i%2
		m := message("delay-"+strconv.Itoa(i), "TagA", i)
		m.WithDelayTimeLevel(level)
		before := time.Now().UnixMilli()
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			fail("send %d: %v", i, err)
			continue
		}
		recordResult("delayed", "TagA", i, m, r)
		mu.Lock()
		sent[len(sent)-1]["level"] = level
		sent[len(sent)-1]["sentAt"] = before
		mu.Unlock()
	}
	until(func() bool { return receivedCount(byConsumer("d")) >= *count }, "every delayed message arrived")
	time.Sleep(time.Second)
}

type transactions struct{}

func (transactions) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch m.GetProperty("idx") {
	case "0":
		return primitive.CommitMessageState
	case "1":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (transactions) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	record(&received, map[string]any{"kind": "check", "msgId": m.MsgId, "topic": m.Topic,
		"body": string(m.Body), "transactionId": m.TransactionId})
	return primitive.CommitMessageState
}

func stateName(s primitive.LocalTransactionState) string {
	switch s {
	case primitive.CommitMessageState:
		return "COMMIT_MESSAGE"
	case primitive.RollbackMessageState:
		return "ROLLBACK_MESSAGE"
	}
	return "UNKNOW"
}

func transaction() {
	p, err := rocketmq.NewTransactionProducer(transactions{},
		producer.WithInstanceName(instance("tx-producer")),
		producer.WithNameServer([]string{*namesrv}),
		producer.WithGroupName(*group+"-tx-producer"),
		producer.WithCredentials(credentials()),
		producer.WithTls(*useTLS))
	if err != nil {
		fail("transaction producer: %v", err)
		return
	}
	if err := p.Start(); err != nil {
		fail("start transaction producer: %v", err)
		return
	}
	defer p.Shutdown()
	c := pushConsumer("t", *group, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, m *primitive.MessageExt) consumer.ConsumeResult {
			record(&received, map[string]any{"kind": "delivery", "message": view(m)})
			return consumer.ConsumeSuccess
		})
	if c == nil {
		return
	}
	defer c.consumer.Shutdown()
	for i := 0; i < *count; i++ {
		m := message("tx-"+strconv.Itoa(i), "TagA", i)
		r, err := p.SendMessageInTransaction(context.Background(), m)
		if err != nil {
			fail("transactional send %d: %v", i, err)
			continue
		}
		record(&sent, map[string]any{"idx": i, "msgId": r.MsgID, "status": statusName(r.Status),
			"localState": stateName(r.State), "transactionId": r.TransactionID})
	}
	deliveries := func(r map[string]any) bool { return r["kind"] == "delivery" }
	until(func() bool { return receivedCount(deliveries) >= *count-1 }, "every committed message arrived")
	time.Sleep(2 * time.Second) // the rolled-back one would come meanwhile
}

func litePull() {
	p, err := newProducer()
	if err != nil {
		fail("producer: %v", err)
		return
	}
	sendPhase(p, "pulled", 0)
	p.Shutdown()
	c, err := consumer.NewPullConsumer(
		consumer.WithInstance(instance("lite-pull")),
		consumer.WithNameServer([]string{*namesrv}),
		consumer.WithGroupName(*group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithCredentials(credentials()),
		consumer.WithTls(*useTLS))
	if err != nil {
		fail("pull consumer: %v", err)
		return
	}
	queues := routeOf()
	if len(queues) == 0 {
		return
	}
	if err := c.Assign(*topic, queues); err != nil {
		fail("assign: %v", err)
		return
	}
	if err := c.Start(); err != nil {
		fail("start pull consumer: %v", err)
		return
	}
	defer c.Shutdown()
	poll := func(n int32) {
		phase.Store(n)
		until(func() bool {
			request, err := c.Poll(context.Background(), time.Second)
			if err != nil {
				if !consumer.IsNoNewMsgError(err) {
					fail("poll: %v", err)
				}
			} else {
				for _, m := range request.GetMsgList() {
					record(&received, map[string]any{"phase": n, "message": view(m)})
				}
				c.ACK(context.Background(), request, consumer.ConsumeSuccess)
			}
			return receivedCount(byPhase(n)) >= *count
		}, fmt.Sprintf("poll %d read every message", n))
	}
	poll(1)
	// Back to the start of every queue: the same messages come again.
	for _, q := range queues {
		c.SeekOffset(q, 0)
	}
	poll(2)
	if err := c.PersistOffset(context.Background(), *topic); err != nil {
		fail("persist offsets: %v", err)
	}
	offsets := map[string]int64{}
	for _, q := range queues {
		offset, _ := c.CurrentOffset(q)
		offsets[strconv.Itoa(q.QueueId)] = offset
	}
	extra["offsets"] = offsets
}

// acl: the signed client sends and consumes; the unsigned one and one with a wrong secret
// cannot send, and say why.
func acl() {
	sendOnly()
	c := pushConsumer("signed", *group, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, collecting("signed"))
	if c != nil {
		until(func() bool { return receivedCount(byConsumer("signed")) >= *count }, "the signed consumer got every message")
		c.consumer.Shutdown()
	}
	refusals := []map[string]any{}
	try := func(name string, creds primitive.Credentials, target string) {
		p, err := rocketmq.NewProducer(producer.WithNameServer([]string{*namesrv}),
			producer.WithInstanceName(instance(name)),
			producer.WithGroupName(*group+"-"+name), producer.WithRetry(0),
			producer.WithCredentials(creds), producer.WithSendMsgTimeout(5*time.Second))
		entry := map[string]any{"case": name}
		if err == nil {
			err = p.Start()
		}
		if err == nil {
			m := primitive.NewMessage(target, []byte("refused"))
			var r *primitive.SendResult
			r, err = p.SendSync(context.Background(), m)
			if err == nil {
				entry["status"] = statusName(r.Status)
			}
			p.Shutdown()
		}
		if err != nil {
			entry["error"] = err.Error()
		}
		refusals = append(refusals, entry)
	}
	try("unsigned", primitive.Credentials{}, *topic)
	try("wrong-secret", primitive.Credentials{AccessKey: *accessKey, SecretKey: "not-" + *secretKey}, *topic)
	if *deniedTopic != "" {
		try("denied-topic", credentials(), *deniedTopic)
	}
	extra["refusals"] = refusals
}

func tlsAndPlain() {
	for _, secure := range []bool{true, false} {
		*useTLS = secure
		name := map[bool]string{true: "tls", false: "plain"}[secure]
		p, err := newProducer(producer.WithGroupName(*group + "-" + name))
		if err != nil {
			fail("%s producer: %v", name, err)
			continue
		}
		sendPhase(p, name, 1)
		p.Shutdown()
	}
	for _, secure := range []bool{true, false} {
		*useTLS = secure
		name := map[bool]string{true: "tls", false: "plain"}[secure]
		c := pushConsumer(name, *group+"-"+name, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, collecting(name))
		if c == nil {
			continue
		}
		until(func() bool { return receivedCount(byConsumer(name)) >= 2**count }, name+" consumer got every message")
		c.consumer.Shutdown()
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: official-client-go-remoting <scenario> --namesrv host:port --topic T --group G")
		os.Exit(2)
	}
	mode := os.Args[1]
	if err := flag.CommandLine.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if *logDir != "" {
		_ = os.MkdirAll(*logDir, 0o755)
		if err := rlog.SetOutputPath(filepath.Join(*logDir, "rocketmq-go.log")); err != nil {
			fail("client log: %v", err)
		}
	}
	if os.Getenv("ROCKETMQ_GO_LOG_LEVEL") == "" {
		rlog.SetLogLevel("warn")
	}
	scenarios := map[string]func(){
		"produce-consume": produceConsume, "send": sendOnly, "rebalance": rebalance,
		"broadcast": broadcast, "orderly": orderly, "retry": retry, "delay": delay,
		"transaction": transaction, "lite-pull": litePull, "acl": acl, "tls": tlsAndPlain,
	}
	run, known := scenarios[mode]
	if !known {
		names := []string{}
		for name := range scenarios {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "unknown scenario %q; one of %v\n", mode, names)
		os.Exit(2)
	}
	run()
	mu.Lock()
	summary := map[string]any{"sent": sent, "received": received, "errors": errs}
	for k, v := range extra {
		summary[k] = v
	}
	mu.Unlock()
	out, _ := json.Marshal(summary)
	fmt.Println(string(out))
	if len(errs) > 0 {
		os.Exit(1)
	}
}

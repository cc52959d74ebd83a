// The official RocketMQ Go client v5 against one endpoint, printing a JSON summary on stdout.
//
//	official-client-go --endpoint HOST:PORT --topic T --group G [--count N]
//	    [--access-key K --secret-key S] [--deadline-s S]
//	    [--mode roundtrip|transaction|sql92|fifo-partial-ack] [--fifo-topic F --run R]
//	    [--invisible-s S]
//
// Sends COUNT messages one by one, then receives them with a SimpleConsumer (ack each)
// until all came back or the deadline passed, and prints
// {"sent": [ids], "received": [ids], "checked": [ids], "errors": [text]}; exit status 0
// when no error occurred. With --mode transaction it sends one message in a transaction left
// open instead, answers the broker's check of it with COMMIT ("checked"), then
// receives it.
// With --mode sql92 it sends, on TOPIC and on FIFO_TOPIC (there in one message group), five
// messages with the property run=RUN and these a and b: match-1 (a=7 b=x), below (a=3 b=x),
// missing (b=x), mismatch (a=seven b=x), match-2 (a=9 b=x); then, all at once,
// SimpleConsumers of fresh groups (GROUP-<topic>-<name>) subscribed with
// "run = 'RUN' AND (<expression>)" for "match" (a > 5 AND b = 'x'), "null" (a IS NULL) and
// "not" (NOT (a > 5)), each receiving until it has been quiet for a poll after its first
// message (or the deadline), and one subscribed with "a > > 1", whose receive must fail:
// {"topics": {topic: {"sent": {case: id}, "simple": {name: [ids]}, "refused": text}},
// "errors": [text]}.
// With --mode fifo-partial-ack it sends nothing: it receives a batch of COUNT
// from the (FIFO) topic invisible for --invisible-s ("received"), acks all but the first,
// receives again and reports what came the second time with its delivery attempt
// ("again": [{"id", "attempt"}]), acking it.
// The connection keeps the client's defaults (TLS on, the server certificate not verified).
// The client insists on credentials; without --access-key it signs with empty keys, which a
// broker with authentication off ignores.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

type delivery struct {
	ID      string `json:"id"`
	Attempt int32  `json:"attempt"`
}

type summary struct {
	Sent     []string   `json:"sent"`
	Received []string   `json:"received"`
	Checked  []string   `json:"checked"`
	Again    []delivery `json:"again"`
	Errors   []string   `json:"errors"`
}

func main() {
	endpoint := flag.String("endpoint", "", "HOST:PORT of the broker")
	topic := flag.String("topic", "", "topic to send to and receive from")
	group := flag.String("group", "", "consumer group")
	count := flag.Int("count", 10, "messages to send")
	accessKey := flag.String("access-key", "", "access key to sign with")
	secretKey := flag.String("secret-key", "", "secret key to sign with")
	deadlineS := flag.Int("deadline-s", 60, "how long to wait for the messages to come back")
	mode := flag.String("mode", "roundtrip", "roundtrip, transaction (one message in an open transaction), sql92 or fifo-partial-ack")
	fifoTopic := flag.String("fifo-topic", "", "sql92: the FIFO topic")
	run := flag.String("run", "run", "sql92: the run property of this run's messages")
	invisibleS := flag.Int("invisible-s", 30, "invisible duration of the first FIFO batch")
	flag.Parse()

	out := summary{Sent: []string{}, Received: []string{}, Checked: []string{}, Again: []delivery{}, Errors: []string{}}
	config := &rmq.Config{
		Endpoint:      *endpoint,
		ConsumerGroup: *group,
		Credentials:   &credentials.SessionCredentials{AccessKey: *accessKey, AccessSecret: *secretKey},
	}
	ctx := context.Background()
	deadline := time.Now().Add(time.Duration(*deadlineS) * time.Second)
	if *mode == "sql92" {
		result := sql92(ctx, *config, []string{*topic, *fifoTopic}, *run, deadline)
		encoded, _ := json.Marshal(result)
		fmt.Println(string(encoded))
		if len(result.Errors) > 0 {
			os.Exit(1)
		}
		return
	}

	if *mode == "fifo-partial-ack" {
		if err := fifoPartialAck(ctx, config, *topic, *count, *invisibleS, deadline, &out); err != nil {
			out.Errors = append(out.Errors, "fifo: "+err.Error())
		}
		encoded, _ := json.Marshal(out)
		fmt.Println(string(encoded))
		if len(out.Errors) > 0 {
			os.Exit(1)
		}
		return
	}
	if *mode == "transaction" {
		if err := sendInTransaction(ctx, config, *topic, deadline, &out); err != nil {
			out.Errors = append(out.Errors, "transaction: "+err.Error())
		}
	} else if err := send(ctx, config, *topic, *count, &out); err != nil {
		out.Errors = append(out.Errors, "send: "+err.Error())
	}
	if len(out.Sent) > 0 {
		if err := receive(ctx, config, *topic, deadline, &out); err != nil {
			out.Errors = append(out.Errors, "receive: "+err.Error())
		}
	}
	encoded, _ := json.Marshal(out)
	fmt.Println(string(encoded))
	if len(out.Errors) > 0 {
		os.Exit(1)
	}
}

func send(ctx context.Context, config *rmq.Config, topic string, count int, out *summary) error {
	producer, err := rmq.NewProducer(config, rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	for i := 0; i < count; i++ {
		message := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("message-%d", i))}
		receipts, err := producer.Send(ctx, message)
		if err != nil {
			return err
		}
		out.Sent = append(out.Sent, receipts[0].MessageID)
	}
	return nil
}

func sendInTransaction(ctx context.Context, config *rmq.Config, topic string, deadline time.Time, out *summary) error {
	checked := make(chan string, 16)
	checker := &rmq.TransactionChecker{Check: func(view *rmq.MessageView) rmq.TransactionResolution {
		checked <- view.GetMessageId()
		return rmq.COMMIT
	}}
	producer, err := rmq.NewProducer(config, rmq.WithTopics(topic), rmq.WithTransactionChecker(checker))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	message := &rmq.Message{Topic: topic, Body: []byte("in a transaction")}
	receipts, err := producer.SendWithTransaction(ctx, message, producer.BeginTransaction())
	if err != nil {
		return err
	}
	out.Sent = append(out.Sent, receipts[0].MessageID)
	// Neither committed nor rolled back here: the broker has to ask this producer.
	select {
	case id := <-checked:
		out.Checked = append(out.Checked, id)
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("the broker never checked the open transaction")
	}
	return nil
}

func receive(ctx context.Context, config *rmq.Config, topic string, deadline time.Time, out *summary) error {
	consumer, err := rmq.NewSimpleConsumer(config,
		// The broker refuses long polls shorter than 5 s.
		rmq.WithAwaitDuration(5*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
	)
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return err
	}
	defer consumer.GracefulStop()
	seen := map[string]bool{}
	for len(seen) < len(out.Sent) && time.Now().Before(deadline) {
		views, err := consumer.Receive(ctx, 16, 30*time.Second)
		if err != nil {
			// An empty long poll comes back as an error whose status is MESSAGE_NOT_FOUND.
			if status, ok := err.(*rmq.ErrRpcStatus); ok && status.Code == 40401 {
				continue
			}
			return err
		}
		for _, view := range views {
			if err := consumer.Ack(ctx, view); err != nil {
				return err
			}
			if !seen[view.GetMessageId()] {
				seen[view.GetMessageId()] = true
				out.Received = append(out.Received, view.GetMessageId())
			}
		}
	}
	return nil
}

type sqlTopic struct {
	Sent    map[string]string   `json:"sent"`
	Simple  map[string][]string `json:"simple"`
	Refused string              `json:"refused"`
}

type sqlSummary struct {
	Topics map[string]*sqlTopic `json:"topics"`
	Errors []string             `json:"errors"`
}

var sqlExpressions = [][2]string{
	{"match", "a > 5 AND b = 'x'"}, {"null", "a IS NULL"}, {"not", "NOT (a > 5)"},
}

// name, a ("" for none), b
var sqlCases = [][3]string{
	{"match-1", "7", "x"}, {"below", "3", "x"}, {"missing", "", "x"},
	{"mismatch", "seven", "x"}, {"match-2", "9", "x"},
}

const badSQL = "a > > 1"

func sql92(ctx context.Context, config rmq.Config, topics []string, run string, deadline time.Time) *sqlSummary {
	out := &sqlSummary{Topics: map[string]*sqlTopic{}, Errors: []string{}}
	var lock sync.Mutex
	fail := func(what string, err error) {
		lock.Lock()
		defer lock.Unlock()
		out.Errors = append(out.Errors, what+": "+err.Error())
	}
	for i, topic := range topics {
		result := &sqlTopic{Sent: map[string]string{}, Simple: map[string][]string{}}
		out.Topics[topic] = result
		if err := sendSQLCases(ctx, &config, topic, i == 1, run, result.Sent); err != nil {
			fail("send to "+topic, err)
		}
	}
	var wait sync.WaitGroup
	base := config.ConsumerGroup
	for _, topic := range topics {
		result := out.Topics[topic]
		for _, expression := range sqlExpressions {
			name, sql := expression[0], "run = '"+run+"' AND ("+expression[1]+")"
			groupConfig := config
			groupConfig.ConsumerGroup = base + "-" + topic + "-" + name
			wait.Add(1)
			go func(topic string) {
				defer wait.Done()
				ids, err := receiveSQL(ctx, &groupConfig, topic, sql, deadline)
				if err != nil {
					fail("simple consumer "+groupConfig.ConsumerGroup, err)
				}
				lock.Lock()
				result.Simple[name] = ids
				lock.Unlock()
			}(topic)
		}
		badConfig := config
		badConfig.ConsumerGroup = base + "-" + topic + "-bad"
		wait.Add(1)
		go func(topic string) {
			defer wait.Done()
			_, err := receiveSQL(ctx, &badConfig, topic, badSQL, deadline)
			lock.Lock()
			defer lock.Unlock()
			if err != nil {
				result.Refused = err.Error()
			}
		}(topic)
	}
	wait.Wait()
	return out
}

func sendSQLCases(ctx context.Context, config *rmq.Config, topic string, fifo bool, run string, ids map[string]string) error {
	producer, err := rmq.NewProducer(config, rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	for _, sqlCase := range sqlCases {
		message := &rmq.Message{Topic: topic, Body: []byte(sqlCase[0])}
		message.AddProperty("run", run)
		message.AddProperty("b", sqlCase[2])
		if sqlCase[1] != "" {
			message.AddProperty("a", sqlCase[1])
		}
		if fifo {
			message.SetMessageGroup("sql92-group")
		}
		receipts, err := producer.Send(ctx, message)
		if err != nil {
			return err
		}
		ids[sqlCase[0]] = receipts[0].MessageID
	}
	return nil
}

func fifoPartialAck(ctx context.Context, config *rmq.Config, topic string, count int, invisibleS int, deadline time.Time, out *summary) error {
	consumer, err := rmq.NewSimpleConsumer(config,
		rmq.WithAwaitDuration(5*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
	)
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return err
	}
	defer consumer.GracefulStop()
	first, err := receiveSome(ctx, consumer, int32(count), time.Duration(invisibleS)*time.Second, deadline)
	if err != nil {
		return err
	}
	for _, view := range first {
		out.Received = append(out.Received, view.GetMessageId())
	}
	for _, view := range first[1:] {
		if err := consumer.Ack(ctx, view); err != nil {
			return err
		}
	}
	again, err := receiveSome(ctx, consumer, int32(count), 30*time.Second, deadline)
	if err != nil {
		return err
	}
	for _, view := range again {
		out.Again = append(out.Again, delivery{ID: view.GetMessageId(), Attempt: view.GetDeliveryAttempt()})
		if err := consumer.Ack(ctx, view); err != nil {
			return err
		}
	}
	return nil
}

// The IDs a SimpleConsumer subscribed with sql receives (acking each) until a poll after
// the first message comes back empty, or the deadline; the first error other than an empty
// poll ends it.
func receiveSQL(ctx context.Context, config *rmq.Config, topic, sql string, deadline time.Time) ([]string, error) {
	received := []string{}
	filter := rmq.NewFilterExpressionWithType(sql, rmq.SQL92)
	consumer, err := rmq.NewSimpleConsumer(config,
		rmq.WithAwaitDuration(5*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: filter}),
	)
	if err != nil {
		return received, err
	}
	if err := consumer.Start(); err != nil {
		return received, err
	}
	defer consumer.GracefulStop()
	// Apache RocketMQ's proxy fails a receive that comes before the client's settings
	// reached it (a NullPointerException, as INTERNAL_SERVER_ERROR); this client does not
	// wait for them at start, so a receive is tried again until they have.
	settled := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		views, err := consumer.Receive(ctx, 16, 30*time.Second)
		if status, ok := err.(*rmq.ErrRpcStatus); ok && status.Code == 40401 {
			views, err = nil, nil
		}
		if status, ok := err.(*rmq.ErrRpcStatus); ok && status.Code == 50001 &&
			strings.Contains(status.Message, "Settings") && time.Now().Before(settled) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			return received, err
		}
		if len(views) == 0 && len(received) > 0 {
			break
		}
		for _, view := range views {
			if err := consumer.Ack(ctx, view); err != nil {
				return received, err
			}
			received = append(received, view.GetMessageId())
		}
	}
	return received, nil
}

// receiveSome receives until a receive brings messages or the deadline passes.
func receiveSome(ctx context.Context, consumer rmq.SimpleConsumer, count int32, invisible time.Duration, deadline time.Time) ([]*rmq.MessageView, error) {
	for time.Now().Before(deadline) {
		views, err := consumer.Receive(ctx, count, invisible)
		if err != nil {
			if status, ok := err.(*rmq.ErrRpcStatus); ok && status.Code == 40401 {
				continue
			}
			return nil, err
		}
		if len(views) > 0 {
			return views, nil
		}
	}
	return nil, fmt.Errorf("nothing came before the deadline")
}

// The official RocketMQ Go client v5 against one endpoint, printing a JSON summary on stdout.
//
//	official-client-go --endpoint HOST:PORT --topic T --group G [--count N]
//	    [--access-key K --secret-key S] [--deadline-s S] [--mode roundtrip|transaction]
//
// Sends COUNT messages one by one, then receives them with a SimpleConsumer (ack each)
// until all came back or the deadline passed, and prints
// {"sent": [ids], "received": [ids], "checked": [ids], "errors": [text]}; exit status 0
// when no error occurred. With --mode transaction it sends one message in a transaction left
// open instead, answers the broker's check of it with COMMIT ("checked"), then
// receives it.
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
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

type summary struct {
	Sent     []string `json:"sent"`
	Received []string `json:"received"`
	Checked  []string `json:"checked"`
	Errors   []string `json:"errors"`
}

func main() {
	endpoint := flag.String("endpoint", "", "HOST:PORT of the broker")
	topic := flag.String("topic", "", "topic to send to and receive from")
	group := flag.String("group", "", "consumer group")
	count := flag.Int("count", 10, "messages to send")
	accessKey := flag.String("access-key", "", "access key to sign with")
	secretKey := flag.String("secret-key", "", "secret key to sign with")
	deadlineS := flag.Int("deadline-s", 60, "how long to wait for the messages to come back")
	mode := flag.String("mode", "roundtrip", "roundtrip, or transaction: one message in an open transaction")
	flag.Parse()

	out := summary{Sent: []string{}, Received: []string{}, Checked: []string{}, Errors: []string{}}
	config := &rmq.Config{
		Endpoint:      *endpoint,
		ConsumerGroup: *group,
		Credentials:   &credentials.SessionCredentials{AccessKey: *accessKey, AccessSecret: *secretKey},
	}
	ctx := context.Background()
	deadline := time.Now().Add(time.Duration(*deadlineS) * time.Second)

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

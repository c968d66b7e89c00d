package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/app"
)

// state reads --store and --queue: the SQLite file of one replica, or the
// DynamoDB table and SQS prefix that several share (in --aws-region, at
// --aws-endpoint when set).
func (f *serveFlags) state() (path string, shared *app.Shared, err error) {
	return stateFlags{f.store, f.queue, f.aws.region, f.aws.endpoint}.parse()
}

// stateFlags are --store, --queue, --aws-region and --aws-endpoint, as
// serve, bench and aws bootstrap take them.
type stateFlags struct{ store, queue, region, endpoint string }

func (f stateFlags) parse() (path string, shared *app.Shared, err error) {
	kind, rest, _ := strings.Cut(f.store, "://")
	switch kind {
	case "sqlite":
		if rest == "" {
			return "", nil, fmt.Errorf("--store %q: want sqlite://PATH", f.store)
		}
		if f.queue != "" && f.queue != "sqlite" {
			return "", nil, fmt.Errorf("--queue %q: the queues of --store sqlite:// are in its file; sqs:// goes with --store dynamodb://", f.queue)
		}
		return rest, nil, nil
	case "dynamodb":
		prefix, ok := strings.CutPrefix(f.queue, "sqs://")
		var problems []error
		if rest == "" {
			problems = append(problems, fmt.Errorf("--store %q: want dynamodb://TABLE", f.store))
		}
		if !ok {
			problems = append(problems, fmt.Errorf("--store dynamodb:// needs --queue sqs://PREFIX: replicas must share their queues too"))
		}
		if f.region == "" {
			problems = append(problems, errors.New("--store dynamodb:// needs --aws-region (or $AWS_REGION)"))
		}
		if err := errors.Join(problems...); err != nil {
			return "", nil, err
		}
		return "", &app.Shared{Table: rest, QueuePrefix: prefix, Region: f.region, Endpoint: f.endpoint}, nil
	}
	return "", nil, fmt.Errorf("--store %q: want sqlite://PATH or dynamodb://TABLE", f.store)
}

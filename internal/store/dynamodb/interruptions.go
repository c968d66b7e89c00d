package dynamodb

import (
	"context"
	"fmt"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Interruptions share one partition, sorted by time then id, so that a
// listing since an instant is one query that reads nothing older. They
// carry no kind, so no index holds them.
const (
	interruptionsPK = "interruptions"
	attrRunner      = "runner"
	attrID          = "id"
)

func interruptionSortKey(i domain.Interruption) string { return formatTime(i.At) + "#" + i.ID }

// RecordInterruption puts i's row, which DynamoDB's time to live removes
// once it has expired. Putting it again writes the same row.
func (s *Store) RecordInterruption(ctx context.Context, i domain.Interruption) error {
	if err := i.Check(); err != nil {
		return fmt.Errorf("record interruption %s: %w", i.ID, err)
	}
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("record interruption %s: %w", i.ID, err)
	}
	// The time to live is in whole seconds: rounded up, so that the row
	// is never removed before it expires.
	ttl := i.Expires.Unix()
	if i.Expires.After(time.Unix(ttl, 0)) {
		ttl++
	}
	item := map[string]types.AttributeValue{
		attrPK: str(interruptionsPK), attrSK: str(interruptionSortKey(i)),
		attrID: str(i.ID), attrRunner: str(i.Runner), attrExpires: str(formatTime(i.Expires)), attrTTL: num(ttl),
	}
	if _, err := s.api.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: s.tbl(), Item: item}); err != nil {
		return fmt.Errorf("record interruption %s: %w", i.ID, describe("PutItem", s.table, err))
	}
	return nil
}

// ListInterruptions reads the partition from since on, consistently, so
// that an interruption another replica has just recorded is counted. The
// rows DynamoDB has not removed yet past their expiry are left out.
func (s *Store) ListInterruptions(ctx context.Context, since time.Time) ([]domain.Interruption, error) {
	if err := domain.CheckTime("since", since); err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	from := ""
	if !since.IsZero() {
		from = formatTime(since)
	}
	now := s.now()
	var out []domain.Interruption
	err := s.readPartition(ctx, interruptionsPK, from, func(item map[string]types.AttributeValue) error {
		i, err := interruptionOf(item)
		if err != nil {
			return err
		}
		if now.Before(i.Expires) {
			out = append(out, i)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	return out, nil
}

func interruptionOf(item map[string]types.AttributeValue) (domain.Interruption, error) {
	i := domain.Interruption{ID: getS(item, attrID), Runner: getS(item, attrRunner)}
	sk := getS(item, attrSK)
	var err error
	if len(sk) < len(timeLayout) {
		return i, fmt.Errorf("interruption row %q: no time in its key", sk)
	}
	if i.At, err = parseTime(sk[:len(timeLayout)]); err == nil {
		i.Expires, err = parseTime(getS(item, attrExpires))
	}
	if err != nil {
		return i, fmt.Errorf("interruption row %q: %w", sk, err)
	}
	return i, nil
}

package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RecordHeartbeat writes the heartbeat attribute alone, never the version,
// so a beat does not make a concurrent transition fail. Beats within
// HeartbeatResolution of the last one written are not written.
func (s *Store) RecordHeartbeat(ctx context.Context, id string, at time.Time) error {
	if err := checkBeat(at); err != nil {
		return fmt.Errorf("record heartbeat of %s: %w", id, err)
	}
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("record heartbeat of %s: %w", id, err)
	}
	if err := s.beat(ctx, id, at); err != nil {
		return fmt.Errorf("record heartbeat of %s: %w", id, err)
	}
	return nil
}

// RecordHeartbeats writes each beat as RecordHeartbeat does, in parallel;
// instances that are gone are ignored.
func (s *Store) RecordHeartbeats(ctx context.Context, beats []domain.Heartbeat) error {
	for _, b := range beats {
		if err := checkBeat(b.At); err != nil {
			return fmt.Errorf("record heartbeats: %s: %w", b.ID, err)
		}
	}
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("record heartbeats: %w", err)
	}
	errs := make([]error, len(beats))
	s.parallel(len(beats), func(k int) {
		if err := s.beat(ctx, beats[k].ID, beats[k].At); err != nil && !errors.Is(err, domain.ErrNotFound) {
			errs[k] = fmt.Errorf("%s: %w", beats[k].ID, err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("record heartbeats: %w", err)
	}
	return nil
}

func checkBeat(at time.Time) error {
	if at.IsZero() {
		return errors.New("zero time")
	}
	return domain.CheckTime("heartbeat", at)
}

// beat writes at unless a beat at least as new, or one within the
// resolution, is known to be stored.
func (s *Store) beat(ctx context.Context, id string, at time.Time) error {
	at = at.UTC()
	if last, ok := s.beats.Load(id); ok && !at.After(last.(time.Time).Add(s.opts.HeartbeatResolution)) && s.opts.HeartbeatResolution > 0 {
		return nil
	}
	_, err := s.api.UpdateItem(ctx, &awsdynamodb.UpdateItemInput{
		TableName: s.tbl(), Key: instanceKey(id),
		UpdateExpression:          aws.String("SET #hb = :at"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND (attribute_not_exists(#hb) OR #hb < :at)"),
		ExpressionAttributeNames:  map[string]string{"#hb": attrBeat, "#pk": attrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": str(formatTime(at))},
	})
	if isConditionFailed(err) {
		// Either the row holds a newer beat or there is no row: only a
		// read tells which.
		in, found, err := instanceKind.get(ctx, s, id)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("instance %s: %w", id, domain.ErrNotFound)
		}
		s.sawBeat(in)
		return nil
	}
	if err != nil {
		return describe("UpdateItem", s.table, err)
	}
	s.recent.beat(instanceKey(id), formatTime(at))
	s.remember(id, at)
	return nil
}

// sawBeat notes the heartbeat a read returned.
func (s *Store) sawBeat(in domain.Instance) {
	if !in.Heartbeat.IsZero() && s.opts.HeartbeatResolution > 0 {
		s.remember(in.ID, in.Heartbeat)
	}
}

func (s *Store) remember(id string, at time.Time) {
	if s.opts.HeartbeatResolution <= 0 {
		return
	}
	for {
		prev, loaded := s.beats.LoadOrStore(id, at)
		if !loaded || !at.After(prev.(time.Time)) || s.beats.CompareAndSwap(id, prev, at) {
			return
		}
	}
}

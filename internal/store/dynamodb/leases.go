package dynamodb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func leaseKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str("lease#" + name), attrSK: str(sortKeyOfRow)}
}

// AcquireLease is one put conditioned on the lease being free, expired or
// already the holder's. Expiry is judged on the caller's clock, so replicas
// whose clocks disagree by more than a small part of the lease period
// could both think they hold it: run them with NTP.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return domain.Lease{}, false, fmt.Errorf("acquire lease %q for %q: need a name, a holder and a positive ttl (got %v)", name, holder, ttl)
	}
	if err := s.checkOpen(); err != nil {
		return domain.Lease{}, false, fmt.Errorf("acquire lease %s for %s: %w", name, holder, err)
	}
	now := s.now()
	lease := domain.Lease{Name: name, Holder: holder, Expires: now.Add(ttl)}
	item := leaseKey(name)
	item[attrHolder], item[attrExpires] = str(holder), str(formatTime(lease.Expires))
	_, err := s.api.PutItem(ctx, &awsdynamodb.PutItemInput{
		TableName: s.tbl(), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk) OR #holder = :holder OR #expires <= :now"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#holder": attrHolder, "#expires": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":holder": str(holder), ":now": str(formatTime(now)),
		},
	})
	if isConditionFailed(err) {
		cur, err := s.readLease(ctx, name)
		if err != nil {
			return domain.Lease{}, false, fmt.Errorf("acquire lease %s for %s: %w", name, holder, err)
		}
		return cur, false, nil
	}
	if err != nil {
		return domain.Lease{}, false, fmt.Errorf("acquire lease %s for %s: %w", name, holder, describe("PutItem", s.table, err))
	}
	return lease, true, nil
}

func (s *Store) readLease(ctx context.Context, name string) (domain.Lease, error) {
	out, err := s.api.GetItem(ctx, &awsdynamodb.GetItemInput{TableName: s.tbl(), Key: leaseKey(name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return domain.Lease{}, describe("GetItem", s.table, err)
	}
	if out.Item == nil {
		return domain.Lease{}, nil
	}
	expires, err := parseTime(getS(out.Item, attrExpires))
	if err != nil {
		return domain.Lease{}, fmt.Errorf("lease %s: expiry: %w", name, err)
	}
	return domain.Lease{Name: name, Holder: getS(out.Item, attrHolder), Expires: expires}, nil
}

// ReleaseLease deletes the lease if holder has it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("release lease %s for %s: %w", name, holder, err)
	}
	_, err := s.api.DeleteItem(ctx, &awsdynamodb.DeleteItemInput{
		TableName: s.tbl(), Key: leaseKey(name),
		ConditionExpression:       aws.String("#holder = :holder"),
		ExpressionAttributeNames:  map[string]string{"#holder": attrHolder},
		ExpressionAttributeValues: map[string]types.AttributeValue{":holder": str(holder)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("release lease %s for %s: %w", name, holder, describe("DeleteItem", s.table, err))
	}
	return nil
}

// PutPoolStatus writes the pool's row in the partition of pool statuses.
func (s *Store) PutPoolStatus(ctx context.Context, ps domain.PoolStatus) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("put pool status %s: %w", ps.Name, err)
	}
	if ps.Name == "" {
		return fmt.Errorf("put pool status: no pool name")
	}
	ps.LastCycle = ps.LastCycle.UTC()
	doc, err := json.Marshal(ps)
	if err != nil {
		return fmt.Errorf("put pool status %s: %w", ps.Name, err)
	}
	_, err = s.api.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: s.tbl(), Item: map[string]types.AttributeValue{
		attrPK: str(poolsPK), attrSK: str(ps.Name), attrDoc: str(string(doc)),
	}})
	if err != nil {
		return fmt.Errorf("put pool status %s: %w", ps.Name, describe("PutItem", s.table, err))
	}
	return nil
}

// ListPoolStatus reads the partition of pool statuses, by pool name.
func (s *Store) ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list pool status: %w", err)
	}
	var out []domain.PoolStatus
	err := s.readPartition(ctx, poolsPK, "", func(item map[string]types.AttributeValue) error {
		var ps domain.PoolStatus
		if err := json.Unmarshal([]byte(getS(item, attrDoc)), &ps); err != nil {
			return fmt.Errorf("pool %s: %w", getS(item, attrSK), err)
		}
		ps.LastCycle = ps.LastCycle.UTC()
		out = append(out, ps)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list pool status: %w", err)
	}
	slices.SortFunc(out, func(a, b domain.PoolStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

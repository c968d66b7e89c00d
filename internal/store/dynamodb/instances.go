package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// maxTransact is the most items one TransactWriteItems takes.
const maxTransact = 100

// CreateInstances inserts the rows in transactions of up to 100, each put
// conditioned on the id being free. Should a later transaction of a large
// call fail, the rows of the earlier ones are deleted again, so the call
// stays all-or-nothing to its caller.
func (s *Store) CreateInstances(ctx context.Context, insts []domain.Instance) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("create instances: %w", err)
	}
	seen := make(map[string]bool, len(insts))
	for _, in := range insts {
		if err := in.Validate(); err != nil {
			return fmt.Errorf("create instances: %w", err)
		}
		if seen[in.ID] {
			return fmt.Errorf("create instances: instance %s twice: %w", in.ID, domain.ErrExists)
		}
		seen[in.ID] = true
	}
	now := s.now()
	var done []string
	for _, chunk := range domain.Chunk(insts, maxTransact) {
		puts := make([]types.TransactWriteItem, len(chunk))
		for k, in := range chunk {
			in.Version = 1
			in.CreatedAt, in.UpdatedAt, in.StateSince = now, now, now
			utcTimes(&in)
			item, err := s.instanceItem(in)
			if err != nil {
				return errors.Join(fmt.Errorf("create instances: %w", err), s.undoCreate(ctx, done))
			}
			puts[k] = types.TransactWriteItem{Put: &types.Put{
				TableName: s.tbl(), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}}
		}
		if err := s.transact(ctx, puts); err != nil {
			if reasons := cancelled(err); reasons != nil {
				for k, r := range reasons {
					if r.Code != nil && *r.Code == "ConditionalCheckFailed" && k < len(chunk) {
						err = fmt.Errorf("instance %s: %w", chunk[k].ID, domain.ErrExists)
					}
				}
			}
			return errors.Join(fmt.Errorf("create instances: %w", err), s.undoCreate(ctx, done))
		}
		for _, in := range chunk {
			done = append(done, in.ID)
		}
	}
	return nil
}

// undoCreate deletes rows this call created before one of its later
// transactions failed.
func (s *Store) undoCreate(ctx context.Context, ids []string) error {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for k, id := range ids {
		keys[k] = instanceKey(id)
	}
	if err := s.deleteKeys(ctx, keys); err != nil {
		return fmt.Errorf("undo the rows created before the failure: %w", err)
	}
	return nil
}

// transact writes items in one transaction. The rows it updates are no
// longer as remembered, whether it succeeded or not. A transaction
// cancelled for throughput alone is sent again after a backoff (see
// throttled), as each of its writes would be by the SDK; any other
// cancellation is returned as DynamoDB gave it, for the caller to read
// its reasons.
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) error {
	defer func() {
		for _, it := range items {
			if it.Update != nil {
				s.recent.forget(it.Update.Key)
			}
		}
	}()
	th := throttled{s: s}
	for {
		// A new input each time, so that each call gets its own
		// idempotency token: the cancelled call wrote nothing.
		_, err := s.api.TransactWriteItems(ctx, &awsdynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return nil
		}
		reasons := cancelled(err)
		if reasons == nil {
			return describe("TransactWriteItems", s.table, err)
		}
		if !throttledOnly(reasons) {
			return err
		}
		if werr := th.again(ctx, false); werr != nil {
			return fmt.Errorf("%w: %w", describe("TransactWriteItems", s.table, err), werr)
		}
	}
}

// GetInstance reads the row consistently.
func (s *Store) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	in, err := instanceKind.read(ctx, s, id)
	if err != nil {
		return domain.Instance{}, err
	}
	s.sawBeat(in)
	return in, nil
}

// ListInstances queries the index of the filter's most selective field and
// checks the others on what it returns; with a limit, it reads no more of
// the index than it needs (rowKind.find), and with a position, none of it
// before the position.
func (s *Store) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	ls := instanceLookups(f)
	if f.After != nil {
		if err := domain.CheckTime("position", f.After.CreatedAt); err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		ls = pastOrder(ls, order(f.After.CreatedAt, f.After.ID))
	}
	out, err := instanceKind.find(ctx, s, ls, f.Newest, f.Limit, func(in domain.Instance) bool { return matchesInstance(in, f) })
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return instanceKind.listing(out, f.Newest, f.Limit), nil
}

// instanceLookups are the index queries that find every instance f keeps.
func instanceLookups(f domain.InstanceFilter) []lookup {
	switch {
	case f.TokenHash != "":
		return []lookup{{index: indexToken, attr: attrToken, value: f.TokenHash}}
	case f.CloudID != "":
		return []lookup{{index: indexCloud, attr: attrCloud, value: f.CloudID}}
	case f.Job != "":
		return []lookup{{index: indexLink, attr: attrLink, value: kindInstance + "#" + f.Job}}
	}
	return poolLookups(kindInstance, f.Pool, f.States, domain.State.Terminal)
}

func matchesInstance(in domain.Instance, f domain.InstanceFilter) bool {
	for _, c := range [][2]string{{f.Pool, in.Pool}, {f.Runner, in.Runner}, {f.Job, in.Job}, {f.CloudID, in.CloudID}, {f.TokenHash, in.AgentTokenHash}} {
		if c[0] != "" && c[0] != c[1] {
			return false
		}
	}
	return (len(f.States) == 0 || slices.Contains(f.States, in.State)) &&
		(f.ExpiredAt.IsZero() || in.Expired(f.ExpiredAt)) &&
		f.After.Passed(in.CreatedAt, in.ID, f.Newest)
}

// Transition is one guarded transition: the decision on the row as read
// consistently now or a moment ago (see recentRows), and an UpdateItem
// conditioned on the version decided on.
func (s *Store) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	return instanceKind.transition(ctx, s, id, g, fn)
}

// TransitionBatch applies the requests as parallel conditional writes.
func (s *Store) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	return instanceKind.transitionBatch(ctx, s, reqs)
}

// DeleteInstances removes terminated rows. A terminated row never changes
// again, so reading them and then deleting needs no transaction.
func (s *Store) DeleteInstances(ctx context.Context, ids []string) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	unique := slices.Compact(slices.Sorted(slices.Values(ids)))
	keys := make([]map[string]types.AttributeValue, len(unique))
	for k, id := range unique {
		keys[k] = instanceKey(id)
	}
	items, err := s.batchGet(ctx, keys)
	if err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	found, err := instanceKind.matching(items, func(domain.Instance) bool { return true })
	if err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	slices.SortFunc(found, func(a, b domain.Instance) int { return strings.Compare(a.ID, b.ID) })
	var live []string
	keys = keys[:0]
	for _, in := range found {
		if in.State != domain.StateTerminated {
			live = append(live, fmt.Sprintf("%s (%s)", in.ID, in.State))
			continue
		}
		keys = append(keys, instanceKey(in.ID))
	}
	if len(live) > 0 {
		return fmt.Errorf("delete instances: refusing to delete instances not in state %s: %s",
			domain.StateTerminated, strings.Join(live, ", "))
	}
	if err := s.deleteKeys(ctx, keys); err != nil {
		return fmt.Errorf("delete instances: %w", err)
	}
	for _, id := range ids {
		s.beats.Delete(id)
	}
	return nil
}

// maxBatchGet is the most keys one BatchGetItem takes.
const maxBatchGet = 100

// batchGet reads the rows of keys consistently, 100 to a call, asking
// again, after a backoff (see throttled), for what DynamoDB left
// unprocessed; rows that do not exist are left out, and the rest come in
// no particular order.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	for _, chunk := range domain.Chunk(keys, maxBatchGet) {
		th := throttled{s: s}
		for len(chunk) > 0 {
			page, err := s.api.BatchGetItem(ctx, &awsdynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: chunk, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return nil, describe("BatchGetItem", s.table, err)
			}
			out = append(out, page.Responses[s.table]...)
			left := page.UnprocessedKeys[s.table].Keys
			if len(left) == 0 {
				break
			}
			if err := th.again(ctx, len(left) < len(chunk)); err != nil {
				return nil, fmt.Errorf("dynamodb BatchGetItem on %s: %d reads still unprocessed: %w: %w", s.table, len(left), awsconf.ErrThrottled, err)
			}
			chunk = left
		}
	}
	return out, nil
}

// deleteKeys deletes rows in batches of 25, sending again what DynamoDB
// left unprocessed.
func (s *Store) deleteKeys(ctx context.Context, keys []map[string]types.AttributeValue) error {
	s.recent.forget(keys...)
	for _, chunk := range domain.Chunk(keys, 25) {
		reqs := make([]types.WriteRequest, len(chunk))
		for k, key := range chunk {
			reqs[k] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key}}
		}
		if err := s.batchWrite(ctx, reqs); err != nil {
			return err
		}
	}
	return nil
}

// batchWrite writes reqs in one BatchWriteItem, sending again, after a
// backoff (see throttled), what DynamoDB left unprocessed.
func (s *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	th := throttled{s: s}
	for len(reqs) > 0 {
		out, err := s.api.BatchWriteItem(ctx, &awsdynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.table: reqs}})
		if err != nil {
			return describe("BatchWriteItem", s.table, err)
		}
		left := out.UnprocessedItems[s.table]
		if len(left) == 0 {
			break
		}
		if err := th.again(ctx, len(left) < len(reqs)); err != nil {
			return fmt.Errorf("dynamodb BatchWriteItem on %s: %d writes still unprocessed: %w: %w", s.table, len(left), awsconf.ErrThrottled, err)
		}
		reqs = left
	}
	return nil
}

package dynamodb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// configKey is a source's row, in a partition of its own: it carries no
// kind, so no index holds it.
func configKey(source string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str("config#" + source), attrSK: str(sortKeyOfRow)}
}

// PutConfiguration writes the source's row, replacing it.
func (s *Store) PutConfiguration(ctx context.Context, c domain.ConfigRecord) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("put configuration %s: %w", c.Source, err)
	}
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("put configuration %s: %w", c.Source, err)
	}
	item := configKey(c.Source)
	item[attrData], item[attrPutAt] = &types.AttributeValueMemberB{Value: c.Data}, str(formatTime(c.At))
	if _, err := s.api.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: s.tbl(), Item: item}); err != nil {
		return fmt.Errorf("put configuration %s: %w", c.Source, describe("PutItem", s.table, err))
	}
	return nil
}

// GetConfiguration reads the source's row consistently: a replica starting
// just after another put a file in force reads that file.
func (s *Store) GetConfiguration(ctx context.Context, source string) (domain.ConfigRecord, bool, error) {
	if err := s.checkOpen(); err != nil {
		return domain.ConfigRecord{}, false, fmt.Errorf("get configuration %s: %w", source, err)
	}
	out, err := s.api.GetItem(ctx, &awsdynamodb.GetItemInput{TableName: s.tbl(), Key: configKey(source), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return domain.ConfigRecord{}, false, fmt.Errorf("get configuration %s: %w", source, describe("GetItem", s.table, err))
	}
	if out.Item == nil {
		return domain.ConfigRecord{}, false, nil
	}
	data, _ := out.Item[attrData].(*types.AttributeValueMemberB)
	at, err := parseTime(getS(out.Item, attrPutAt))
	if err != nil || data == nil {
		return domain.ConfigRecord{}, false, fmt.Errorf("get configuration %s: a row without its file or time (%v)", source, err)
	}
	return domain.ConfigRecord{Source: source, Data: data.Value, At: at.UTC()}, true, nil
}

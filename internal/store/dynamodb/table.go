package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The table's global secondary indexes. Each is keyed by one attribute and
// sorted by creation (ord), and projects whole rows, so a listing is one
// query and no second read. Attributes are prefixed by the row's kind
// where instances and jobs share an index.
const (
	indexKind  = "by-kind"  // every instance, every job: the fallback
	indexState = "by-state" // instances by state, jobs by status
	indexPool  = "by-pool"
	indexLink  = "by-link"  // instances by job, jobs by instance
	indexToken = "by-token" // an agent's token hash
	indexCloud = "by-cloud" // a provider's machine id
	indexRerun = "by-rerun" // sparse: interrupted jobs not re-run yet
)

var indexes = []struct{ name, attr string }{
	{indexKind, attrKind}, {indexState, attrState}, {indexPool, attrPool}, {indexLink, attrLink},
	{indexToken, attrToken}, {indexCloud, attrCloud}, {indexRerun, attrRerun},
}

// lookup is one query of an index for one key.
type lookup struct {
	index, attr, value string
	// newest reads the newest rows first, where a query reads the oldest
	// first.
	newest bool
	// before, when set, bounds the query to the rows whose ord sorts before
	// it: a key condition, so the rows after it are never read (or paid for).
	before string
}

// maxPageRows caps the rows a growing page asks for (see query); DynamoDB
// ends a page at 1 MB anyway.
const maxPageRows = 1000

// query hands each page of the rows the lookup finds, in the index's
// order, to each, until each says it has enough or the rows run out.
// pageRows, when positive, caps the first page at that many rows and
// every page after at twice the one before: a caller that wants n rows
// and keeps every row it reads stops after one page of exactly n, not a
// page of a megabyte, and one that skips rows still gets there in a few
// pages. With no cap each page is a megabyte of rows, for a caller that
// reads them all.
func (s *Store) query(ctx context.Context, l lookup, pageRows int, each func([]map[string]types.AttributeValue) (enough bool, err error)) error {
	in := &awsdynamodb.QueryInput{
		TableName: s.tbl(), IndexName: aws.String(l.index),
		KeyConditionExpression:    aws.String("#k = :v"),
		ExpressionAttributeNames:  map[string]string{"#k": l.attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": str(l.value)},
		ScanIndexForward:          aws.Bool(!l.newest),
	}
	if l.before != "" {
		in.KeyConditionExpression = aws.String("#k = :v AND #ord < :before")
		in.ExpressionAttributeNames["#ord"] = attrOrder
		in.ExpressionAttributeValues[":before"] = str(l.before)
	}
	for {
		if pageRows > 0 {
			pageRows = min(pageRows, maxPageRows)
			in.Limit = aws.Int32(int32(pageRows))
			pageRows *= 2
		}
		page, err := s.api.Query(ctx, in)
		if err != nil {
			return describe("Query "+l.index, s.table, err)
		}
		enough, err := each(page.Items)
		if err != nil || enough || len(page.LastEvaluatedKey) == 0 {
			return err
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// TableAPI is what Ensure needs of the client.
type TableAPI interface {
	DescribeTable(context.Context, *awsdynamodb.DescribeTableInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *awsdynamodb.CreateTableInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.CreateTableOutput, error)
	DescribeTimeToLive(context.Context, *awsdynamodb.DescribeTimeToLiveInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(context.Context, *awsdynamodb.UpdateTimeToLiveInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.UpdateTimeToLiveOutput, error)
}

// Ensure creates table with its indexes and time to live unless it
// exists, and reports what it did: "created" or "found". On-demand
// capacity: bullpen's load comes in bursts that provisioned capacity
// would throttle or pay for idle.
func Ensure(ctx context.Context, api TableAPI, table string) (string, error) {
	_, err := api.DescribeTable(ctx, &awsdynamodb.DescribeTableInput{TableName: aws.String(table)})
	did := "found"
	if err != nil {
		if !errors.Is(describe("DescribeTable", table, err), ErrNoTable) {
			return "", describe("DescribeTable", table, err)
		}
		if _, err := api.CreateTable(ctx, tableSpec(table)); err != nil {
			return "", describe("CreateTable", table, err)
		}
		did = "created"
	}
	if err := waitActive(ctx, api, table); err != nil {
		return "", err
	}
	ttl, err := api.DescribeTimeToLive(ctx, &awsdynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return "", describe("DescribeTimeToLive", table, err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus == types.TimeToLiveStatusDisabled {
		_, err := api.UpdateTimeToLive(ctx, &awsdynamodb.UpdateTimeToLiveInput{TableName: aws.String(table),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)}})
		if err != nil {
			return "", describe("UpdateTimeToLive", table, err)
		}
	}
	return did, nil
}

func tableSpec(table string) *awsdynamodb.CreateTableInput {
	attrs := []types.AttributeDefinition{
		{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String(attrOrder), AttributeType: types.ScalarAttributeTypeS},
	}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range indexes {
		attrs = append(attrs, types.AttributeDefinition{AttributeName: aws.String(ix.attr), AttributeType: types.ScalarAttributeTypeS})
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(ix.attr), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrOrder), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		})
	}
	return &awsdynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: attrs,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
	}
}

// waitActive polls until a new table is ready to use; DynamoDB gives no
// signal for it.
func waitActive(ctx context.Context, api TableAPI, table string) error {
	for {
		out, err := api.DescribeTable(ctx, &awsdynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return describe("DescribeTable", table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamodb table %s: not active yet: %w", table, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// check fails unless table exists and is active.
func check(ctx context.Context, api TableAPI, table string) error {
	out, err := api.DescribeTable(ctx, &awsdynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return describe("DescribeTable", table, err)
	}
	if out.Table == nil || out.Table.TableStatus != types.TableStatusActive {
		return fmt.Errorf("dynamodb table %s is not active", table)
	}
	return nil
}

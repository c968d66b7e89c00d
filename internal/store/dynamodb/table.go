package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
	// after, when set, bounds the query to the rows whose ord comes after
	// it in the order read (newest first or not): a key condition too, so
	// a page further on does not read the pages before it.
	after string
}

// ordBound is the lookup's key condition on ord, if any: the operator and
// the value. A key condition takes one bound of the sort key, so a lookup
// may have two only when both are upper ones (newest first).
func (l lookup) ordBound() (op, value string, err error) {
	switch {
	case l.after == "" && l.before == "":
		return "", "", nil
	case l.after == "":
		return "<", l.before, nil
	case l.newest && l.before != "":
		return "<", min(l.after, l.before), nil
	case l.newest:
		return "<", l.after, nil
	case l.before != "":
		return "", "", fmt.Errorf("query %s: a page after %q and before %q oldest first takes two key conditions", l.index, l.after, l.before)
	}
	return ">", l.after, nil
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
	op, bound, err := l.ordBound()
	if err != nil {
		return err
	}
	if op != "" {
		in.KeyConditionExpression = aws.String("#k = :v AND #ord " + op + " :bound")
		in.ExpressionAttributeNames["#ord"] = attrOrder
		in.ExpressionAttributeValues[":bound"] = str(bound)
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

// readPartition hands each row of the table's partition pk to each, in
// sort key order from from on (from "": every row), reading consistently:
// a row another replica has just written is read.
func (s *Store) readPartition(ctx context.Context, pk, from string, each func(map[string]types.AttributeValue) error) error {
	in := &awsdynamodb.QueryInput{
		TableName: s.tbl(), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
	}
	if from != "" {
		in.KeyConditionExpression = aws.String("#pk = :pk AND #sk >= :from")
		in.ExpressionAttributeNames["#sk"] = attrSK
		in.ExpressionAttributeValues[":from"] = str(from)
	}
	for {
		page, err := s.api.Query(ctx, in)
		if err != nil {
			return describe("Query", s.table, err)
		}
		for _, item := range page.Items {
			if err := each(item); err != nil {
				return err
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return nil
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
// would throttle or pay for idle. A table found without bullpen's keys
// and indexes is an error, as Open would refuse it.
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
	desc, err := waitActive(ctx, api, table)
	if err != nil {
		return "", err
	}
	if err := checkLayout(table, desc); err != nil {
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

// waitActive polls until a new table is ready to use, and returns its
// description; DynamoDB gives no signal for it.
func waitActive(ctx context.Context, api TableAPI, table string) (*types.TableDescription, error) {
	for {
		out, err := api.DescribeTable(ctx, &awsdynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return nil, describe("DescribeTable", table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return out.Table, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dynamodb table %s: not active yet: %w", table, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// ErrTableLayout: the table exists but lacks the keys or indexes bullpen
// reads it by.
var ErrTableLayout = errors.New("table lacks the keys or indexes bullpen needs")

// check fails unless table exists, is active and has bullpen's keys and
// indexes: a table made by other tooling without an index would pass a
// look at its status and fail the queries of that index at run time. A
// time to live that is off only draws a warning: the table works, but
// keeps the rows bullpen's own clean-up misses.
func check(ctx context.Context, api TableAPI, table string, log *slog.Logger) error {
	out, err := api.DescribeTable(ctx, &awsdynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return describe("DescribeTable", table, err)
	}
	if out.Table == nil || out.Table.TableStatus != types.TableStatusActive {
		return fmt.Errorf("dynamodb table %s is not active", table)
	}
	if err := checkLayout(table, out.Table); err != nil {
		return err
	}
	// A warning at most, and so is a failure to read it: a policy
	// printed before the store read it lacks the permission.
	ttl, err := api.DescribeTimeToLive(ctx, &awsdynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		log.Warn("dynamodb table: could not read its time to live", "table", table, "err", describe("DescribeTimeToLive", table, err))
		return nil
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != attrTTL ||
		(d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling) {
		log.Warn("dynamodb table: time to live is not on attribute "+attrTTL+", so rows bullpen's clean-up misses are kept for ever; `bullpen aws bootstrap` turns it on",
			"table", table)
	}
	return nil
}

// checkLayout fails, naming each problem and the fix, unless the table
// has bullpen's keys and every index bullpen queries, ready.
func checkLayout(table string, d *types.TableDescription) error {
	var problems, building []string
	if got := keysOf(d.KeySchema); got != keysOf(tableSpec(table).KeySchema) {
		problems = append(problems, fmt.Sprintf("its key is %s, want %s", got, keysOf(tableSpec(table).KeySchema)))
	}
	for _, want := range tableSpec(table).GlobalSecondaryIndexes {
		name := aws.ToString(want.IndexName)
		i := slices.IndexFunc(d.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool { return aws.ToString(g.IndexName) == name })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("index %s is missing", name))
			continue
		}
		got := d.GlobalSecondaryIndexes[i]
		if keysOf(got.KeySchema) != keysOf(want.KeySchema) {
			problems = append(problems, fmt.Sprintf("index %s is keyed %s, want %s", name, keysOf(got.KeySchema), keysOf(want.KeySchema)))
		}
		if got.Projection == nil || got.Projection.ProjectionType != types.ProjectionTypeAll {
			problems = append(problems, fmt.Sprintf("index %s does not project every attribute (ALL)", name))
		}
		if got.IndexStatus != "" && got.IndexStatus != types.IndexStatusActive {
			building = append(building, fmt.Sprintf("index %s is %s, not yet ACTIVE", name, got.IndexStatus))
		}
	}
	if len(problems) == 0 && len(building) > 0 {
		// Not a layout a human must mend: the index is on its way, and a
		// start a little later finds it ready.
		return fmt.Errorf("dynamodb table %s: %s", table, strings.Join(building, "; "))
	}
	problems = append(problems, building...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("dynamodb table %s: %w: %s (`bullpen aws bootstrap` creates a table that has them under a name not yet taken; "+
		"or add each index to this one, keyed by its attribute (hash) and %s (range), projecting ALL, and wait until it is ACTIVE)",
		table, ErrTableLayout, strings.Join(problems, "; "), attrOrder)
}

// keysOf writes a key schema as "pk (HASH), sk (RANGE)".
func keysOf(ks []types.KeySchemaElement) string {
	parts := make([]string, len(ks))
	for k, e := range ks {
		parts[k] = fmt.Sprintf("%s (%s)", aws.ToString(e.AttributeName), e.KeyType)
	}
	return strings.Join(parts, ", ")
}

package dynamodb

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// described is the description DynamoDB gives of the table Ensure
// creates, with change applied to it.
func described(change func(*types.TableDescription)) *types.TableDescription {
	spec := tableSpec("bullpen")
	d := &types.TableDescription{TableName: spec.TableName, KeySchema: spec.KeySchema, TableStatus: types.TableStatusActive}
	for _, g := range spec.GlobalSecondaryIndexes {
		d.GlobalSecondaryIndexes = append(d.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
			IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection, IndexStatus: types.IndexStatusActive})
	}
	if change != nil {
		change(d)
	}
	return d
}

// Each way a table can lack what bullpen reads it by is named.
func TestCheckLayout(t *testing.T) {
	if err := checkLayout("bullpen", described(nil)); err != nil {
		t.Fatalf("the table Ensure creates: %v", err)
	}
	for want, change := range map[string]func(*types.TableDescription){
		"its key is id (HASH), want pk (HASH), sk (RANGE)": func(d *types.TableDescription) {
			d.KeySchema = []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}
		},
		"index by-cloud is missing": func(d *types.TableDescription) {
			d.GlobalSecondaryIndexes = d.GlobalSecondaryIndexes[:5]
		},
		"index by-kind is keyed kind (HASH), want kind (HASH), ord (RANGE)": func(d *types.TableDescription) {
			d.GlobalSecondaryIndexes[0].KeySchema = d.GlobalSecondaryIndexes[0].KeySchema[:1]
		},
		"index by-kind does not project every attribute": func(d *types.TableDescription) {
			d.GlobalSecondaryIndexes[0].Projection = &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}
		},
	} {
		err := checkLayout("bullpen", described(change))
		if !errors.Is(err, ErrTableLayout) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bullpen aws bootstrap") {
			t.Errorf("got %v; want ErrTableLayout saying %q and what to do", err, want)
		}
	}
	// An index still being built is on its way: not a layout to mend (serve
	// exits for a restart to find it ready), unless the table has a
	// problem of its own too.
	creating := func(d *types.TableDescription) { d.GlobalSecondaryIndexes[0].IndexStatus = types.IndexStatusCreating }
	if err := checkLayout("bullpen", described(creating)); err == nil || errors.Is(err, ErrTableLayout) || !strings.Contains(err.Error(), "index by-kind is CREATING, not yet ACTIVE") {
		t.Errorf("an index being built: %v; want it named, not as ErrTableLayout", err)
	}
	both := func(d *types.TableDescription) {
		creating(d)
		d.GlobalSecondaryIndexes = d.GlobalSecondaryIndexes[:5]
	}
	if err := checkLayout("bullpen", described(both)); !errors.Is(err, ErrTableLayout) || !strings.Contains(err.Error(), "CREATING") {
		t.Errorf("an index being built beside one missing: %v; want ErrTableLayout naming both", err)
	}
}

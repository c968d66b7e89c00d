package dynamodb

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Attribute names. A row's fields travel as one JSON document (doc); the
// attributes beside it are what conditions and indexes need, and the
// secrets JSON leaves out.
const (
	attrPK       = "pk"
	attrSK       = "sk"
	attrDoc      = "doc"
	attrVersion  = "ver"
	attrOrder    = "ord"  // created time and id: the sort key of every index
	attrKind     = "kind" // "inst" or "job"
	attrState    = "st"   // kind#state or kind#status
	attrPool     = "pool" // kind#pool
	attrLink     = "link" // an instance's job, a job's instance (kind#…)
	attrToken    = "tok"  // an instance's agent token hash
	attrCloud    = "cloud"
	attrRerun    = "rerun" // set on interrupted jobs not re-run yet
	attrBeat     = "hb"    // the agent's heartbeat, kept out of doc
	attrConfig   = "rcfg"  // the runner's just-in-time configuration
	attrBoot     = "boot"  // the bootstrap secret's hash
	attrHolder   = "holder"
	attrExpires  = "expires"
	attrTTL      = "ttl"  // epoch seconds: DynamoDB removes the row after it
	attrMark     = "mark" // the last single conditional write's own mark (writeMark)
	attrData     = "data" // a configuration file's bytes
	attrPutAt    = "at"
	sortKeyOfRow = "row"
	poolsPK      = "pools"
)

// indexed are the optional attributes a row may lose in a transition:
// an update removes those the new row does not have.
var indexed = []string{attrPool, attrLink, attrToken, attrCloud, attrRerun, attrTTL, attrConfig, attrBoot}

const (
	kindInstance = "inst"
	kindJob      = "job"
)

// timeLayout is fixed-width, so that times compare as strings do.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) { return time.Parse(timeLayout, s) }

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func instanceKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(kindInstance + "#" + id), attrSK: str(sortKeyOfRow)}
}

func jobKey(id int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(fmt.Sprintf("%s#%d", kindJob, id)), attrSK: str(sortKeyOfRow)}
}

// order is the sort key that lists rows by creation, then id, as the port
// wants them.
func order(created time.Time, id string) string { return formatTime(created) + "#" + id }

func jobOrderID(id int64) string { return fmt.Sprintf("%020d", id) }

// instanceItem is the row of i, with every attribute its indexes need.
func (s *Store) instanceItem(i domain.Instance) (map[string]types.AttributeValue, error) {
	beat := i.Heartbeat
	i.Heartbeat = time.Time{}
	doc, err := json.Marshal(i)
	if err != nil {
		return nil, fmt.Errorf("encode instance %s: %w", i.ID, err)
	}
	item := instanceKey(i.ID)
	item[attrDoc] = str(string(doc))
	item[attrVersion] = num(i.Version)
	item[attrOrder] = str(order(i.CreatedAt, i.ID))
	item[attrKind] = str(kindInstance)
	item[attrState] = str(kindInstance + "#" + string(i.State))
	optional(item, attrPool, kindInstance, i.Pool)
	optional(item, attrLink, kindInstance, i.Job)
	optional(item, attrToken, "", i.AgentTokenHash)
	optional(item, attrCloud, "", i.CloudID)
	optional(item, attrConfig, "", i.RunnerConfig)
	optional(item, attrBoot, "", i.BootstrapHash)
	if !beat.IsZero() {
		item[attrBeat] = str(formatTime(beat))
	}
	if i.State == domain.StateTerminated {
		item[attrTTL] = num(i.UpdatedAt.Add(s.opts.Retention).Unix())
	}
	return item, nil
}

// optional sets attr to prefix#v (or v without a prefix) when v is set:
// an index key may not be empty.
func optional(item map[string]types.AttributeValue, attr, prefix, v string) {
	if v == "" {
		return
	}
	if prefix != "" {
		v = prefix + "#" + v
	}
	item[attr] = str(v)
}

func decodeInstance(item map[string]types.AttributeValue) (domain.Instance, error) {
	var i domain.Instance
	if err := json.Unmarshal([]byte(getS(item, attrDoc)), &i); err != nil {
		return i, fmt.Errorf("decode instance %s: %w", getS(item, attrPK), err)
	}
	i.RunnerConfig, i.BootstrapHash, i.AgentTokenHash = getS(item, attrConfig), getS(item, attrBoot), getS(item, attrToken)
	if b := getS(item, attrBeat); b != "" {
		t, err := parseTime(b)
		if err != nil {
			return i, fmt.Errorf("decode instance %s: heartbeat: %w", i.ID, err)
		}
		i.Heartbeat = t
	}
	utcTimes(&i)
	return i, nil
}

func (s *Store) jobItem(j domain.Job) (map[string]types.AttributeValue, error) {
	doc, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode job %d: %w", j.ID, err)
	}
	item := jobKey(j.ID)
	item[attrDoc] = str(string(doc))
	item[attrVersion] = num(j.Version)
	item[attrOrder] = str(order(j.CreatedAt, jobOrderID(j.ID)))
	item[attrKind] = str(kindJob)
	item[attrState] = str(kindJob + "#" + string(j.Status))
	optional(item, attrPool, kindJob, j.Pool)
	// The link is the instance bound to the job, which JobFilter.Instance
	// looks up; the instance a launch is under way on (LaunchedOn) binds
	// nothing and is looked up by no one, so the doc alone carries it.
	optional(item, attrLink, kindJob, j.InstanceID)
	if j.Interrupted && !j.Rerun {
		item[attrRerun] = str(kindJob)
	}
	if j.Status.Final() {
		item[attrTTL] = num(j.UpdatedAt.Add(s.opts.Retention).Unix())
	}
	return item, nil
}

func decodeJob(item map[string]types.AttributeValue) (domain.Job, error) {
	var j domain.Job
	if err := json.Unmarshal([]byte(getS(item, attrDoc)), &j); err != nil {
		return j, fmt.Errorf("decode job %s: %w", getS(item, attrPK), err)
	}
	utcTimes(&j)
	return j, nil
}

func getS(item map[string]types.AttributeValue, attr string) string {
	if v, ok := item[attr].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

var timeType = reflect.TypeFor[time.Time]()

// utcTimes puts every time field of the struct p points to in UTC, as the
// port promises; JSON keeps the zone a time was written in.
func utcTimes(p any) {
	v := reflect.ValueOf(p).Elem()
	for k := range v.NumField() {
		f := v.Field(k)
		if f.Type() != timeType || !f.CanSet() {
			continue
		}
		if t := f.Interface().(time.Time); t.IsZero() {
			f.Set(reflect.ValueOf(time.Time{}))
		} else {
			f.Set(reflect.ValueOf(t.UTC()))
		}
	}
}

package awsconf

import (
	"reflect"
	"slices"
)

// Statement is one statement of an IAM policy document.
type Statement struct {
	Sid       string                    `json:"Sid"`
	Effect    string                    `json:"Effect"`
	Action    []string                  `json:"Action"`
	Resource  []string                  `json:"Resource"`
	Condition map[string]map[string]any `json:"Condition,omitempty"`
}

// Actions names, as IAM does (service:Action), every method of the client
// interface api: an adapter that declares the calls it makes as an
// interface gets a policy that allows exactly those. authorizedAs maps the
// operations IAM authorizes under other actions' names (SQS's batches
// under their single calls, DynamoDB's transactions under the writes they
// contain).
func Actions(service string, api reflect.Type, authorizedAs map[string][]string) []string {
	var out []string
	for i := range api.NumMethod() {
		op := api.Method(i).Name
		names, ok := authorizedAs[op]
		if !ok {
			names = []string{op}
		}
		for _, n := range names {
			out = append(out, service+":"+n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

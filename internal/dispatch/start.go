package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// start starts the stopped instances, at most MaxBatch per call. An item
// whose start failed gets Err: its instance is rolled back and its job
// retried, or, when the cloud had no capacity to start it, sent to the
// launch queue at once (setAsideUnstartable).
func (d *Dispatcher) start(ctx context.Context, items []*item) {
	var stopped []*item
	for _, it := range items {
		if it.wasStopped {
			stopped = append(stopped, it)
		}
	}
	for _, batch := range domain.Chunk(stopped, domain.MaxBatch) {
		d.startBatch(ctx, batch)
	}
}

// startBatch starts one batch of at most MaxBatch instances. EC2 refuses a
// whole StartInstances call when it has no capacity for one instance type in
// one zone, and its error names the type and zone, not the instances: a call
// over several types refused so is made again once per type, so that one
// type short of capacity does not keep the others stopped. The common case,
// every start granted, still costs one call.
func (d *Dispatcher) startBatch(ctx context.Context, batch []*item) {
	d.startCall(ctx, batch)
	if !slices.ContainsFunc(batch, (*item).noCapacity) {
		return
	}
	groups := byInstanceType(batch)
	if len(groups) < 2 {
		return
	}
	for _, g := range groups {
		d.startCall(ctx, g)
	}
}

// startCall makes one start call and records each item's outcome. The cloud
// skips the ids it does not know, and those it refuses to start (a machine
// still stopping), and starts the others (domain.Cloud), so such an error
// fails only the items it names: their jobs are retried, the others served.
func (d *Dispatcher) startCall(ctx context.Context, batch []*item) {
	ids := make([]string, len(batch))
	for i, it := range batch {
		ids[i] = it.Inst.CloudID
	}
	err := d.Cloud.Start(ctx, ids)
	if err != nil {
		d.metrics.cloudErrors.WithLabelValues("StartInstances").Inc()
	}
	notStarted, named := domain.NotActedOn(err)
	started := 0
	for _, it := range batch {
		if err != nil && (!named || slices.Contains(notStarted, it.Inst.CloudID)) {
			it.Err = fmt.Errorf("start: %w", err)
			continue
		}
		it.Err, it.started = nil, true
		started++
	}
	d.metrics.started.Add(float64(started))
}

// byInstanceType groups items by their instance's type, in the order the
// types first appear.
func byInstanceType(items []*item) [][]*item {
	var order []string
	groups := map[string][]*item{}
	for _, it := range items {
		t := it.Inst.InstanceType
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], it)
	}
	out := make([][]*item, len(order))
	for i, t := range order {
		out[i] = groups[t]
	}
	return out
}

// noCapacity reports whether the item's instance could not start for lack
// of capacity in the cloud.
func (it *item) noCapacity() bool {
	return errors.Is(it.Err, domain.ErrInsufficientCapacity)
}

// setAsideUnstartable takes the items whose instance the cloud had no
// capacity to start out of the batch and gives their instances back to
// their pools, stopped: nothing is wrong with them, they cannot start now.
// Their jobs go to the launch queue with the jobs no instance could take:
// retried, they would claim the pool's stopped instances again, which the
// same shortage keeps from starting, and wait for as long as it lasts. A
// new machine may be launched as another type or in another zone. The
// batch's such failures make one line.
func (d *Dispatcher) setAsideUnstartable(ctx context.Context, items []*item) (kept, unstartable []*item) {
	types := map[string]int{}
	var notBack tally
	for _, it := range items {
		if !it.noCapacity() {
			kept = append(kept, it)
			continue
		}
		unstartable = append(unstartable, it)
		types[it.Inst.InstanceType]++
		d.Log.Debug("no capacity to start pool instance; its job goes to the launch queue", "job", it.Job.ID,
			"pool", it.Job.Pool, "instance", it.Inst.ID, "type", it.Inst.InstanceType)
		notBack.add(d.giveBack(ctx, it, "overflowed"))
	}
	if len(unstartable) > 0 {
		d.Log.Warn("no capacity to start pool instances; their jobs go to the launch queue", "count", len(unstartable),
			"types", types, "first_err", unstartable[0].Err)
		notBack.log(d.Log, "give unstartable instances back to their pools")
	}
	return kept, unstartable
}

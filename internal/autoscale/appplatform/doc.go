// Package appplatform is the demand autoscaler as a standalone service: it
// keeps the instance count of a DigitalOcean App Platform worker, whose
// containers run self-hosted GitHub Actions runners, in step with GitHub
// job demand (`bullpen autoscale run`).
//
// Every POLL_INTERVAL a Scaler runs one cycle:
//
//  1. demand: the scope's queued jobs that ask for a self-hosted runner,
//     plus its in-progress jobs on runners named with RUNNER_NAME_PREFIX
//     (every self-hosted one when the prefix is empty), every page of
//     every list, for one repository or every repository of an
//     organisation (CountDemand);
//  2. current: the worker's instance_count in the app's spec;
//  3. autoscale.Decide, logged with its score and reason;
//  4. on up or down, AppPlatform.SetWorkerCount writes the spec back with
//     only that count changed and reads it back to verify; another
//     writer's change met on the way is kept, and the count re-applied on
//     top of the latest spec, a bounded number of times, unless that
//     change is to the count itself: then the other writer's count stands,
//     and the cycle is skipped without a cooldown;
//  5. dead-runner cleanup: runners of the scope that are offline and idle
//     (and named with the prefix, when one is set) at this poll and the
//     one before, and for DeadRunnerAge at least since first seen so, are
//     deleted; one that took a job meanwhile (422) is left alone. An organisation scope without a prefix is refused unless
//     cleanup is off (DEAD_RUNNER_CLEANUP=false).
//
// A transient failure (5xx, timeout, rate limit, a spec that kept
// changing) skips the rest of the cycle with a warning: nothing is decided
// on partial data, and a scaling that was never written starts no
// cooldown. A rate limit is waited out without calls. A permanent failure
// (a refused token, a missing app or worker) is logged as an error every
// cycle until someone fixes it.
//
// The spec travels as raw JSON values rather than godo.AppSpec, so that
// writing it back never drops a field this version of godo does not model;
// godo carries the requests. fakedo is an httptest fake of the two App
// Platform endpoints used, for tests.
package appplatform

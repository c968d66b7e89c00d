// Package autoscale is the pure core of bullpen's demand autoscaler: its
// parameters and their validation, the per-poll decision, and a replay of
// a demand trace through that decision. It does no I/O of its own
// beyond the readers and writers it is handed, so the standalone App Platform
// mode and demand-following pools can share it.
//
// The algorithm is the specification's (DESIGN: Demand autoscaler), with
// the points it leaves open fixed; README.md beside this file explains
// them and the departure from the specification's defaults, and shows a
// worked timeline that a test replays.
package autoscale

// Package autoscale is the pure core of bullpen's demand autoscaler (seed
// 002): its parameters and their validation, the per-poll decision, and a
// replay of a demand trace through that decision. It does no I/O of its own
// beyond the readers and writers it is handed, so the standalone App Platform
// mode and demand-following pools can share it.
//
// The algorithm is the seed's, with the points the seed leaves open fixed by
// issue 5; README.md beside this file explains it, the departure from the
// seed's defaults, and shows a worked timeline that a test replays.
package autoscale

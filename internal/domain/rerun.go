package domain

import "time"

// RerunWithin bounds how long after its creation an interrupted job is
// re-run: a workflow run still going a day later waits for something else
// (an approval, say), and asking every cycle meanwhile would cost a request
// each time.
const RerunWithin = 24 * time.Hour

// AwaitsRerun reports whether j, failed by a spot interruption, is still to
// be re-run at now: its runner's retry allows it, it was not re-run yet, it
// is less than RerunWithin old, and it was cut short rather than finished
// as the interruption notice came (RanToItsEnd).
func (j Job) AwaitsRerun(now time.Time) bool {
	return j.Interrupted && !j.Rerun && j.Spec.RerunsInterrupted() && now.Sub(j.CreatedAt) < RerunWithin && !RanToItsEnd(j.Conclusion)
}

// RanToItsEnd reports whether GitHub's conclusion says a job was not cut
// short: its machine's interruption notice came as it finished.
func RanToItsEnd(conclusion string) bool {
	switch conclusion {
	case "success", "skipped", "neutral":
		return true
	}
	return false
}

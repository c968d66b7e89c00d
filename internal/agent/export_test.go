package agent

// EnvNames lists the environment names the agent reads.
func EnvNames() []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.env()
	}
	return out
}

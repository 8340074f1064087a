package agent_test

// The agent's NATS names, as docs/AGENT.md documents them for subscribers: a
// black-box test spells them out instead of importing the service's
// internal/bus, so a change to the published names fails here.
const eventStream = "FABRO_AGENT_EVENTS"

// eventSubject is the subject of one event type of one session.
func eventSubject(sessionID, eventType string) string {
	return "fabro.agent.v1.sessions." + sessionID + ".events." + eventType
}

// sessionFilter matches every event of one session.
func sessionFilter(sessionID string) string {
	return "fabro.agent.v1.sessions." + sessionID + ".events.>"
}

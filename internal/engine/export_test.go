package engine

// Waiting exposes how many records something in e waits on, for tests.
func Waiting(e *Engine) int { return e.waiting() }

package httpapi

// Refusal is a request refused before its route runs: the HTTP status to
// answer and a message that says what to do instead.
type Refusal struct {
	// Status is the HTTP status code: 403, 415.
	Status int
	// Message is for the client, without a prefix naming the module.
	Message string
}

func (r *Refusal) Error() string { return r.Message }

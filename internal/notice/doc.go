// Package notice tells a streaming LLM request that waits for the GPU
// why it waits, in its own API's stream (wait_notice): Ollama's NDJSON
// with the notice as "thinking", OpenAI's server-sent chunks with it as
// "reasoning_content", both with empty content, so that a chat UI shows
// it in its collapsed reasoning block and keeps it there.
//
// The response's head is sent with the first notice, before the GPU is
// the request's; the engine's own stream then follows in the same
// response, its status line and headers swallowed (Wait.Writer). Any
// refusal or failure after the head is a last chunk in the API's error
// shape (Wait.Finish), since the status can no longer say it.
//
// The package knows the stream shapes and nothing of the GPU: what it
// needs of the turnstile is a Source.
package notice

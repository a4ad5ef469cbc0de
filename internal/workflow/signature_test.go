package workflow

// Signature is the key of a job of kind to path, as the engine kinds read
// their jobs (engine/<kind>.Kind.Signature, which this package cannot
// import): the formats are tested here.
func Signature(kind, path string, body []byte) string {
	var sig string
	switch kind {
	case "comfyui":
		if path == "/prompt" || path == "/api/prompt" {
			sig = NodeGraph(body)
		}
	case "a1111":
		switch path {
		case "/sdapi/v1/txt2img", "/sdapi/v1/img2img":
			sig = Generation(body)
		case "/sdapi/v1/extra-single-image", "/sdapi/v1/extra-batch-images":
			sig = Upscale(body)
		}
	}
	return Key(kind, sig)
}

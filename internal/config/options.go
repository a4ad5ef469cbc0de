package config

// handlerOptions are the subdirectives of the gpu_turnstile directive's
// block and where each value goes; the class is its argument, and
// engine_routes is set by gpu_turnstile_proxy alone. docs/configuration.md
// lists each (TestDocsListEveryOption).
func handlerOptions(hd HandlerFields) map[string]*string {
	return map[string]*string{"turnstile": hd.Turnstile, "engine": hd.Engine, "during_job": hd.DuringJob, "wait_notice": hd.WaitNotice}
}

package config

import "go.uber.org/zap"

// LogFields describe the config for the start-up log: the engines and
// every setting, defaults filled in.
func (c *Turnstile) LogFields() []zap.Field {
	fields := []zap.Field{zap.Strings("engines", c.EngineSummary()),
		zap.String("llm_busy_mode", map[bool]string{false: "wait", true: "reject"}[c.Reject]),
		zap.Int("llm_busy_status", c.BusyStatus), zap.Duration("busy_retry_after", c.RetryAfter),
		zap.Duration("llm_wait_timeout", c.LLMWait), zap.Duration("unload_timeout", c.GPU.UnloadTimeout),
		zap.Duration("job_timeout", c.GPU.JobTimeout), zap.Duration("free_timeout", c.GPU.FreeTimeout),
		zap.String("warm_model", c.WarmModel), zap.Duration("warm_timeout", c.GPU.WarmTimeout),
		zap.Duration("unload_poll_interval", c.GPU.UnloadPoll), zap.Duration("history_poll_interval", c.HistoryPoll),
		zap.Duration("probe_timeout", c.GPU.ProbeTimeout), zap.Duration("backoff_initial", c.GPU.BackoffInitial),
		zap.Duration("backoff_max", c.GPU.BackoffMax), zap.Int64("prompt_capture_limit", c.CaptureLimit),
		zap.Int("max_image_streak", c.MaxImageStreak),
		zap.Int64("wait_buffer_limit", c.WaitBuffer), zap.Int("max_waiting", c.MaxWaiting),
		zap.Strings("hold_while", c.PresenceSummary())}
	if m := c.GPU.Memory; m != nil {
		fields = append(fields, zap.Bool("vram_admission", true), zap.Int64("vram_reserve", m.Reserve),
			zap.Duration("vram_poll_interval", m.Poll), zap.Strings("model_vram", modelSizes(m.Models)),
			zap.Strings("co_resident", m.CoResident))
	}
	return fields
}

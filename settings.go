package turnstile

import tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"

// Settings configure one turnstile: the GPU it guards and the engines that
// share it (internal/config documents each field).
type Settings = tcfg.Settings

// EngineSettings configure one engine that shares the turnstile's GPU.
type EngineSettings = tcfg.EngineSettings

// PresenceSettings are the conditions under which the GPU yields to the
// person at the machine.
type PresenceSettings = tcfg.PresenceSettings

// config is a turnstile's settings validated, with defaults filled in and
// clients built; one is made per config load and swapped in when the
// config starts.
type config = tcfg.Turnstile

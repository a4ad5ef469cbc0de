"""GPU turnstile: shows in the ComfyUI frontend why this tab's queued
prompt waits for the GPU (caddy-gpu-turnstile) and for about how long.

A frontend extension only: ComfyUI serves ./js under /extensions/ and the
frontend loads it. It adds no nodes; NODE_CLASS_MAPPINGS is there, empty,
because ComfyUI marks a custom node without it as failed to import.
"""

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
WEB_DIRECTORY = "./js"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]

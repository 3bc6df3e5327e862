"""The only code that talks to the Kubernetes API (clients, server-side apply, watches)."""

"""Push notifications: webhook delivery (``delivery``) and its SSRF guard (``guard``).

The package imports nothing; import the module you need."""

"""archiver's migrations and ready-made ops queries, installed as the package
`archiver.migrations` so a wheel carries them (see pyproject.toml)."""

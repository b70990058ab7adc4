"""The middle's request and answer types, pure: a chat request checked field by field
(`request`, `checks`), OpenAI-shaped bodies (`completion`), answer validation (`validation`)
and JSON paths (`paths`)."""

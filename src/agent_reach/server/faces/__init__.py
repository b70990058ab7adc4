"""The proxy's API faces, one module each (Chat Completions, Responses, Messages, Gemini,
step mode, the status page), and what they share (`relay`)."""

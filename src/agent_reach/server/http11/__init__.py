"""Our HTTP/1.1 server on llhttp: connections and their limits, the request and response
types, descriptors. It knows no API: the app hands it the error body of a path."""

"""JSON-RPC 2.0: framing and one peer per connection."""

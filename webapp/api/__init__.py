"""The versioned HTTP API (/api/v1/): personal bearer tokens, the same roles as the pages, one router per area."""

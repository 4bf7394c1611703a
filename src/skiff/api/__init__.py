"""HTTP only: parse, authorise, call a service, render JSON. No SQL here."""

"""perf.data reader: file mode, pipe mode, directory forms, records and feature sections."""

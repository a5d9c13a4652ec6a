"""The pipeline's stages as plain functions (source → convert → quantize → package → hash).
Prefect tasks in tasks/ wrap them; tests call them directly. Each takes the Resources and small
references, and returns a StageResult."""

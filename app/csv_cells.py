"""CSV cells a spreadsheet will not run: text starting with = + - @, a tab or a carriage return is a formula
to Excel, LibreOffice and Google Sheets (a class or classifier name like =HYPERLINK(...) would be one),
so such a cell gets a leading apostrophe, as OWASP's "CSV Injection" page recommends."""

import pyarrow as pa
import pyarrow.compute as pc

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
FORMULA_PATTERN = r"^[=+\-@\t\r]"


def neutralised(value: object) -> object:
    """A text cell that a spreadsheet would read as a formula with an apostrophe before it; else the value."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def neutralised_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with neutralised() applied to every cell of its text columns."""
    columns = [
        pc.if_else(
            pc.match_substring_regex(column, FORMULA_PATTERN),
            pc.binary_join_element_wise("'", column, ""),
            column,
        )
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        else column
        for column in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)

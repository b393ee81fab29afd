"""Reference converters that `bench/convert_compare.py` measures `prep convert` against."""

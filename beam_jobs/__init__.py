"""The Apache Beam pipeline that turns listed inputs into shards, built from `prep`'s pure functions."""

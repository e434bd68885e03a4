//! RocksDB settings shared by the master's metadata store and the worker's block index:
//! both serve point lookups from a small, fixed amount of memory.

use rocksdb::{BlockBasedIndexType, BlockBasedOptions, Cache, DBCompressionType, Options};

/// Options of a column family of small records through `table`: memtables of
/// `write_buffer` bytes (two at most), and a small base level of small tables, so each
/// compaction's work and memory stay bounded as the store grows. Tables are not
/// compressed: the records are small, and a store written by a RocksDB built with a
/// compression library (Debian's is) must open with one built without any (the
/// bundled build).
pub fn column_family(table: &BlockBasedOptions, write_buffer: usize) -> Options {
    let mut o = Options::default();
    o.set_compression_type(DBCompressionType::None);
    o.set_write_buffer_size(write_buffer);
    o.set_max_write_buffer_number(2);
    o.set_block_based_table_factory(table);
    o.set_max_bytes_for_level_base(16 << 20);
    o.set_target_file_size_base(4 << 20);
    o
}

/// Table settings for point lookups through the one LRU `cache`, whatever the number
/// of tables: every block, index and filter included, goes through the cache.
pub fn point_lookup_tables(cache: &Cache) -> BlockBasedOptions {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    // A bloom filter per table lets a get skip the tables that cannot hold its key
    // (every table but one, or all for a new key).
    table.set_bloom_filter(10.0, false);
    // Index and filter in 4 KiB partitions under a small pinned top level. One filter
    // for a table of a million keys is about 1.2 MB, more than a shard of a small block
    // cache holds (the cache splits into 512 KB shards): it was thrown out after each get
    // and read again by the next, and the master's stats at a million files fell to a
    // few thousand a second. Partitions fit and stay cached.
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_metadata_block_size(4096);
    table.set_pin_top_level_index_and_filter(true);
    table
}

// Writing an LMDB environment behind gpufeed's back, with LMDB itself: for
// tests that plant records gpufeed's writers never make (foreign Caffe
// datums, keys out of order, hostile values).
#ifndef GPUFEED_TESTS_LMDB_TEST_UTIL_H_
#define GPUFEED_TESTS_LMDB_TEST_UTIL_H_

#include <lmdb.h>

#include <string>

namespace gpufeed {

// One write transaction on the main database of the environment at a
// directory that exists. Every call returns LMDB's code (0: done).
// Destruction aborts a transaction not committed and closes the environment,
// so a failed assertion between Begin and Commit leaks nothing.
//
//   LmdbWriteTxn lmdb;
//   ASSERT_EQ(lmdb.Begin(env), 0);
//   ASSERT_EQ(lmdb.Put("key", "value"), 0);
//   ASSERT_EQ(lmdb.Commit(), 0);  // the environment is closed from here
class LmdbWriteTxn {
 public:
  LmdbWriteTxn() = default;
  LmdbWriteTxn(const LmdbWriteTxn&) = delete;
  LmdbWriteTxn& operator=(const LmdbWriteTxn&) = delete;
  ~LmdbWriteTxn() { Close(); }

  // mdb_env_create, mdb_env_open (mode 0644), mdb_txn_begin, mdb_dbi_open:
  // the first code that is not 0. REQUIRES: not begun yet.
  int Begin(const std::string& env_path) {
    int rc = mdb_env_create(&env_);
    if (rc != 0) {
      env_ = nullptr;
      return rc;
    }
    if ((rc = mdb_env_open(env_, env_path.c_str(), 0, 0644)) != 0) return rc;
    if ((rc = mdb_txn_begin(env_, nullptr, 0, &txn_)) != 0) {
      txn_ = nullptr;
      return rc;
    }
    return mdb_dbi_open(txn_, nullptr, 0, &dbi_);
  }

  int Put(const std::string& key, const std::string& value) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    return mdb_put(txn_, dbi_, &k, &v, 0);
  }

  // Commits the transaction and closes the environment (also when the
  // commit fails). REQUIRES: Begin returned 0.
  int Commit() {
    int rc = mdb_txn_commit(txn_);
    txn_ = nullptr;
    Close();
    return rc;
  }

  // For edits beyond Put (mdb_del, mdb_get). Valid between Begin and Commit.
  MDB_txn* txn() const { return txn_; }
  MDB_dbi dbi() const { return dbi_; }

 private:
  void Close() {
    if (txn_ != nullptr) mdb_txn_abort(txn_);
    txn_ = nullptr;
    if (env_ != nullptr) mdb_env_close(env_);
    env_ = nullptr;
  }

  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_LMDB_TEST_UTIL_H_

/** ttpipe examples. */
package dev.ttpipe.examples;
